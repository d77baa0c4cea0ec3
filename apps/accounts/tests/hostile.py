"""Hypothesis strategies for hostile input, shared by the hostile-input tests of every app."""

from hypothesis import strategies as st

FRAGMENTS = [
    "'",
    '"',
    "\\",
    "`",
    "';--",
    "' OR '1'='1",
    '"; DROP TABLE mysql_servers; --',
    "LOAD MYSQL SERVERS TO RUNTIME",
    "<script>alert(1)</script>",
    "{{ 7*7 }}",
    "{% csrf_token %}",
    "%s",
    "%(x)s",
    "\x00",
    "\r\n",
    "é中😀",
    "\u202e",
    "0x00",
    "NULL",
    "-1",
    "99999999999999999999999",
    "1e309",
    "NaN",
    " ",
    "",
]

hostile_text = st.one_of(
    st.sampled_from(FRAGMENTS),
    st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6).map("".join),
    st.text(min_size=0, max_size=60),
    st.sampled_from(["x" * 10_000, "'" * 10_000, "é" * 100_000, "a" * 1_000_000]),
)
# Dates at and beyond the ends of what datetime, the databases and epoch seconds can hold, and dates that
# do not exist; numbers beyond 64 bits and beyond int()'s 4,300 digits. Every date and number parameter
# of every view must answer them with a validation message, never a 500.
BOUNDARY_DATES = [
    "9999-12-31T23:59:59",
    "9999-12-31",
    "0001-01-01",
    "0001-01-01T00:30",
    "10000-01-01",
    "1969-12-31T23:59:59",
    "2024-02-30",
    "253402300800",
    "99999999999999999999",
]
HUGE_NUMBERS = [str(2**63), str(2**64), str(-(2**63) - 1), "9" * 30, "9" * 5000, "1e309", "-1", "0"]
boundary_date = st.sampled_from(BOUNDARY_DATES)
huge_number = st.sampled_from(HUGE_NUMBERS)

hostile_number = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    huge_number,
    st.sampled_from(["", "-0", "1.5", "1e9", "0x10", "٣", "NaN", "inf", "9" * 400]),
    hostile_text,
)
