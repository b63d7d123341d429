"""The example's one view: place an order, its receipt task in the same transaction."""

from django.urls import path
from shop import views

urlpatterns = [path("orders/<str:ref>", views.place_order)]
