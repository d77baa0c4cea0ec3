"""MariaDB GTID positions read as numbers: low in this app, read by the polls and by the moves."""


def gtid_seq(position: str | None, domain: int | str) -> int | None:
    """The sequence number of `domain` in a GTID position ('1-11-5,2-21-3'), or None."""
    for part in (position or "").replace(" ", "").split(","):
        if part.count("-") == 2 and part.split("-")[0] == str(domain):
            return int(part.split("-")[2])
    return None
