from django.apps import AppConfig


class GroupsConfig(AppConfig):
    name = "controlplane.groups"
    label = "groups"
