"""The shop's tables, as `manage.py makemigrations` writes them."""

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = []  # noqa: RUF012 - Django's migration format

    operations = [  # noqa: RUF012
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("ref", models.CharField(max_length=100, unique=True)),
                ("receipt_sent", models.BooleanField(default=False)),
            ],
        ),
        migrations.CreateModel(
            name="SignalLog",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("signal", models.CharField(max_length=20)),
                ("task_id", models.CharField(max_length=40)),
                ("status", models.CharField(max_length=20)),
            ],
        ),
    ]
