"""Placing an order enqueues its receipt in the same transaction: both or neither."""

from django.db import transaction
from django.http import HttpRequest, JsonResponse

from shop.models import Order
from shop.tasks import send_receipt


def place_order(request: HttpRequest, ref: str) -> JsonResponse:
    with transaction.atomic():
        Order.objects.create(ref=ref)
        result = send_receipt.enqueue(ref)
    return JsonResponse({"order": ref, "task": result.id})
