"""Report periods in local time (settings.TIME_ZONE): whole local days, so a daily report is midnight to
midnight even across a DST change (a 23 h or 25 h day), and when a schedule is due."""

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django.utils import timezone

from .choices import Period
from .models import ReportSchedule

DAYS: dict[str, int] = {Period.DAILY: 1, Period.WEEKLY: 7}


@dataclass(frozen=True)
class Span:
    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return (
            self.end.timestamp() - self.start.timestamp()
        )  # not end - start: same-zone datetimes subtract wall clocks

    def previous(self) -> "Span":
        """The span of the same length (in local days when it is made of local days) just before."""
        local_start, local_end = timezone.localtime(self.start), timezone.localtime(self.end)
        if _is_midnight(local_start) and _is_midnight(local_end):
            days = (local_end.date() - local_start.date()).days
            return Span(midnight(local_start.date() - timedelta(days=days)), self.start)
        return Span(self.start - timedelta(seconds=self.seconds), self.start)


def _is_midnight(local: datetime) -> bool:
    return local.time() == time(0)


def midnight(day: date) -> datetime:
    """Local midnight at the start of `day`, as an aware datetime."""
    return datetime.combine(day, time(0), tzinfo=timezone.get_current_timezone())


def ending_on(period: str, end_day: date) -> Span:
    """The period that ends at local midnight starting `end_day` (a daily report 'ending on' the 15th is
    the 14th)."""
    return Span(midnight(end_day - timedelta(days=DAYS[period])), midnight(end_day))


def last_complete(period: str, now: datetime | None = None) -> Span:
    """The last complete day (daily), or the last complete Monday-to-Sunday week (weekly)."""
    today = timezone.localtime(now or timezone.now()).date()
    if period == Period.WEEKLY:
        today -= timedelta(days=today.weekday())
    return ending_on(period, today)


def rolling(period: str, now: datetime | None = None) -> Span:
    """The last 24 hours or 7 days up to now (on demand: today so far)."""
    now = now or timezone.now()
    return Span(now - timedelta(days=DAYS[period]), now)


def due_slot(schedule: ReportSchedule, now: datetime | None = None) -> tuple[datetime, Span]:
    """(send time, span) of the schedule's most recent slot at or before now."""
    local = timezone.localtime(now or timezone.now())
    day = local.date()
    if local.time() < time(schedule.hour):
        day -= timedelta(days=1)
    if schedule.period == Period.WEEKLY:
        day -= timedelta(days=(day.weekday() - schedule.weekday) % 7)
    send = datetime.combine(day, time(schedule.hour), tzinfo=timezone.get_current_timezone())
    return send, ending_on(schedule.period, day)


def is_due(schedule: ReportSchedule, now: datetime | None = None) -> Span | None:
    """The schedule's latest slot has come and its period has not been built yet."""
    if not schedule.enabled:
        return None
    send, span = due_slot(schedule, now)
    if schedule.last_period_end is not None and schedule.last_period_end >= span.end:
        return None
    if schedule.created_at and schedule.created_at > send and schedule.last_period_end is None:
        # A schedule created after today's slot starts with the next one (no surprise report at creation).
        return None
    return span
