"""Pins: canonical hashing, the pin store, the name rules, diffs that name hidden characters, and description
scanning."""

from warden.policy.pins._canonical import arguments_digest, canonical_json, digest, short
from warden.policy.pins._diff import hidden_legend, render_definition, side_by_side
from warden.policy.pins._names import NAME_KINDS, name_skeleton, refused_names
from warden.policy.pins._scan import Finding, scan_definition
from warden.policy.pins._store import Detection, ListObservation, PinEntry, PinStore, entry_key, report_lines
from warden.policy.pins._types import ENTRY_KINDS, EntryKind, PinState

__all__ = [
    "ENTRY_KINDS",
    "NAME_KINDS",
    "Detection",
    "EntryKind",
    "Finding",
    "ListObservation",
    "PinEntry",
    "PinState",
    "PinStore",
    "arguments_digest",
    "canonical_json",
    "digest",
    "entry_key",
    "hidden_legend",
    "name_skeleton",
    "refused_names",
    "render_definition",
    "report_lines",
    "scan_definition",
    "short",
    "side_by_side",
]
