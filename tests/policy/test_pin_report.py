"""What a person reads on stderr when a server's definitions are first seen or change: plain new entries of one
server and kind are summed up in one line; anything that needs a look (a change, a revert, a rejection, a finding,
the server's identity or instructions) keeps a line of its own. Every line stays one line, whatever the names."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from warden.policy.pins import Detection, Finding, report_lines

EVENTS = ("new", "changed", "reverted", "tofu-approved", "rejected")
KINDS = ("tool", "prompt", "resource", "resource_template", "server", "instructions")
NASTY = st.text(alphabet=st.sampled_from(["a", "\n", "\r", "\x1b", "[", "\u202e", "\x00", "'", "\\", "é", "\u2028"]),
                max_size=12)


def detection(server: str = "git", kind: str = "tool", key: str = "t", event: str = "new",
              findings: tuple[Finding, ...] = ()) -> Detection:
    return Detection(server, kind, key, event, "d" * 64, findings=findings)  # type: ignore[arg-type]


def test_a_first_start_is_one_line_per_kind_naming_the_first_few() -> None:
    detections = [detection(kind="instructions", key=""), *(detection(key=f"t{i}") for i in range(9)),
                  detection(kind="prompt", key="p")]
    assert report_lines(detections) == [
        "pins: server 'git': instructions new",
        "pins: server 'git': 9 tools new: 't0', 't1', 't2', 't3', 't4', 't5' and 3 more",
        "pins: server 'git': prompt 'p' new",
    ]


def test_what_needs_a_look_keeps_its_own_line_in_order() -> None:
    finding = Finding("hidden-instructions", "description", "ignore previous")
    detections = [detection(key="a"), detection(key="b", event="changed"), detection(key="c"),
                  detection(key="d", findings=(finding,)), detection(key="e", event="tofu-approved"),
                  detection(key="f", event="tofu-approved")]
    assert report_lines(detections) == [
        "pins: server 'git': 2 tools new: 'a', 'c'",
        "pins: server 'git': tool 'b' changed",
        "pins: server 'git': tool 'd' new (1 finding(s))",
        "pins: server 'git': 2 tools approved on first use: 'e', 'f'",
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(NASTY, st.sampled_from(KINDS), NASTY, st.sampled_from(EVENTS)), max_size=40))
def test_every_detection_is_told_and_no_name_breaks_a_line(raw: list[tuple[str, str, str, str]]) -> None:
    detections = [detection(server, kind, key, event) for server, kind, key, event in raw]
    lines = report_lines(detections)
    for line in lines:
        assert line.isprintable(), line  # no newline, escape, bidi override or NUL of a hostile name gets through
    told = 0
    for line in lines:
        if " new: " in line or " approved on first use: " in line:
            told += int(line.split(": ")[2].split(" ")[0])
        else:
            told += 1
    assert told == len(detections)
    assert len(lines) <= len(detections)
