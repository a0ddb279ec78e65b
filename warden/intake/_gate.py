"""The release-age gate (pure): no version younger than the policy's ``release_age_hours`` is taken.

A freshly published version is where a hijacked maintainer account or a typo-squat does its damage; registries
and scanners usually catch it within a day or two. So warden waits (72 h by default; an org policy sets a floor
a user config cannot lower). The clients' own gates (npm ``--before``, uv ``--exclude-newer``) pick the version;
:func:`check_release_age` then checks the version they picked, with ``now`` passed in.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from warden.errors import IntakeError


def cutoff(now: datetime, hours: int) -> datetime | None:
    """The newest publish time the gate accepts, or None when the gate is off (``hours == 0``)."""
    return None if hours <= 0 else now - timedelta(hours=hours)


def parse_time(text: str) -> datetime:
    """An RFC 3339 time from a registry (``2026-11-01T11:20:05.123Z``), as an aware UTC datetime.

    Raises:
        IntakeError: not a time.
    """
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise IntakeError(f"the registry gave {text[:40]!r} as a publish time, which is not a time",
                          hint="check the registry") from exc
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_release_age(package: str, version: str, published: str | None, *, now: datetime, hours: int,
                      setting: str) -> None:
    """Refuse ``package@version`` if it was published less than ``hours`` before ``now``.

    ``setting`` names where the gate comes from (``user warden.toml:12 (release_age_hours)``), so the refusal
    says what decides it. A version without a publish time is refused while the gate is on: warden cannot tell
    its age, and fails closed.

    Raises:
        IntakeError: naming the version, its publish time and the setting.
    """
    limit = cutoff(now, hours)
    if limit is None:
        return
    if published is None:
        raise IntakeError(f"{package} {version}: the registry gives no publish time, so the release-age gate "
                          f"({hours} h, {setting}) cannot be applied",
                          hint="use a registry that reports publish times, or set release_age_hours = 0 for this "
                               "server in your config")
    moment = parse_time(published)
    if moment > limit:
        age = max(now - moment, timedelta(0))
        raise IntakeError(
            f"{package} {version} was published {rfc3339(moment)} ({age.total_seconds() / 3600:.1f} h ago), "
            f"younger than the release-age gate of {hours} h ({setting})",
            hint=f"wait until {rfc3339(moment + timedelta(hours=hours))}, ask for an older version, or lower "
                 "release_age_hours for this server in your config (an org policy may set a floor)")
