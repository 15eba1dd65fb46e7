from django.apps import AppConfig


class TransactionsConfig(AppConfig):
    name = "controlplane.transactions"
    label = "transactions"
