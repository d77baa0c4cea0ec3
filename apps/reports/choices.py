from django.db import models


class Period(models.TextChoices):
    DAILY = "daily", "daily"
    WEEKLY = "weekly", "weekly"


class Scope(models.TextChoices):
    CLUSTER = "cluster", "one cluster"
    FLEET = "fleet", "the whole fleet"


class Weekday(models.IntegerChoices):
    MONDAY = 0, "Monday"
    TUESDAY = 1, "Tuesday"
    WEDNESDAY = 2, "Wednesday"
    THURSDAY = 3, "Thursday"
    FRIDAY = 4, "Friday"
    SATURDAY = 5, "Saturday"
    SUNDAY = 6, "Sunday"
