"""Hypothesis strategies for hostile input, shared by the hostile-input tests of every app."""
from hypothesis import strategies as st

FRAGMENTS = ["'", '"', "\\", "`", "';--", "' OR '1'='1", "\"; DROP TABLE mysql_servers; --", "LOAD MYSQL SERVERS TO RUNTIME",
             "<script>alert(1)</script>", "{{ 7*7 }}", "{% csrf_token %}", "%s", "%(x)s", "\x00", "\r\n", "é中😀", "\u202e",
             "0x00", "NULL", "-1", "99999999999999999999999", "1e309", "NaN", " ", ""]

hostile_text = st.one_of(
    st.sampled_from(FRAGMENTS),
    st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6).map("".join),
    st.text(min_size=0, max_size=60),
    st.sampled_from(["x" * 10_000, "'" * 10_000, "é" * 100_000, "a" * 1_000_000]),
)
hostile_number = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["", "-0", "1.5", "1e9", "0x10", "٣", "NaN", "inf", "9" * 400]),
    hostile_text,
)
