"""Policy files, layering (org bounds user), the pure decision engine, and pins.

How the gateway uses this package (one upstream server ``S`` launched as ``argv``)::

    policy = load_effective_policy(ctx.config_path, None, ctx.env)   # ConfigError (file:line) if invalid
    sp = policy.server(S, argv)                                     # ServerPolicy; ad-hoc servers get defaults
    d = decide(launch_facts(sp))                                    # DENY -> do not start; print d.reason, d.hint
    # start with sp.sandbox.value, env built from sp.env_names.value; audit records carry sp.digest
    store = PinStore(ctx.private_state_dir())
    manifest = launch_manifest(argv, sp.env_names.value, launcher.manifest(spec), sp.network.value.to_json())
    server_pin, detections = store.observe_server(S, manifest, on_new=sp.on_new.value)
    _, more = store.observe_instructions(S, init_result.get("instructions"), on_new=sp.on_new.value)
    obs = store.observe_list(S, "tool", all_pages_of_tools, on_new=sp.on_new.value)   # every list, every refresh
    # report each Detection (str(d) on stderr now, an audit record later)
    listed = [t for t in tools if decide(ListEntryFacts(sp, "tool", t["name"], obs.states.get(t["name"],
              PinState.UNKNOWN), server_pin)).allowed]
    # per tools/call (cheap: store.state() is one stat + a dict lookup, and sees other terminals' approvals):
    pin = store.state(S, "tool", name, digest_of_current_definition)      # UNKNOWN if not in the current list
    d = decide(ToolCallFacts(sp, name, pin, store.state(S, "server", "", identity_digest(manifest)), arguments,
                             consent_channel=host_caps.elicitation_form,
                             resolved_paths=resolve_argument_paths(sp, name, arguments)))
    # ALLOW -> forward; DENY -> JSON-RPC error from consent.refusal(d) (never forward);
    # ASK -> consent.build_pin_consent(...) via elicitation/create, store.approve_exact(...), decide again;
    # CONFIRM -> consent.build_call_confirmation(...), read_call_confirmation(...) -> confirmed digest, decide again.
    # Forwarded server->host requests: decide(SamplingFacts | ElicitationFacts | RootsRequestFacts); a host's
    # roots answer goes through filter_roots(sp, roots) before the server sees it.

Public names are listed in ``__all__``; everything else is private.
"""

from warden.policy._content import (
    BUILTIN_DETECTORS,
    ContentFinding,
    ContentPolicy,
    ContentScanner,
    Screened,
    screen_arguments,
    screen_result,
)
from warden.policy._decide import (
    Decision,
    Effect,
    ElicitationFacts,
    Facts,
    HostCapabilities,
    LaunchFacts,
    ListEntryFacts,
    PromptGetFacts,
    ResourceReadFacts,
    RootFacts,
    RootsRequestFacts,
    SamplingFacts,
    ToolCallFacts,
    check_elicitation_url,
    decide,
)
from warden.policy._effective import (
    CeilingViolation,
    EffectivePolicy,
    GlobRule,
    LaunchCeilings,
    LayerRules,
    ServerPolicy,
    Setting,
    Source,
    load_effective_policy,
)
from warden.policy._explain import egress_lines, explain
from warden.policy._flow import NEUTRAL, FlowPolicy, FlowRole, TaintMark, classify, qualified_name
from warden.policy._fs import filter_roots, launch_facts, resolve_argument_paths, resolve_root
from warden.policy._glob import GlobSyntaxError, compile_glob, glob_match
from warden.policy._identity import identity_digest, launch_manifest
from warden.policy._load import LoadedFile, load_policy_bytes, load_policy_file
from warden.policy._rate import Bucket, Rate, parse_rate, take
from warden.policy._regex import compile_linear
from warden.policy._sandbox import PROTECTED_NAMES, Limits, SandboxSettings
from warden.policy._taint import (
    TaintedSession,
    TaintLedger,
    clear_session,
    host_process_session,
    host_session_ended,
    principal_session,
    tainted_sessions,
)
from warden.policy._values import (
    env_line,
    references,
    resolve_env,
    secret_reference,
    unpassed_env,
    unpassed_env_warning,
)
from warden.policy._visible import hidden_chars, render_visible
from warden.policy.pins import Detection, Finding, PinEntry, PinState, PinStore, scan_definition
from warden.policy.pins._types import EntryKind

__all__ = [
    "BUILTIN_DETECTORS",
    "NEUTRAL",
    "PROTECTED_NAMES",
    "Bucket",
    "CeilingViolation",
    "ContentFinding",
    "ContentPolicy",
    "ContentScanner",
    "Decision",
    "Detection",
    "Effect",
    "EffectivePolicy",
    "ElicitationFacts",
    "EntryKind",
    "Facts",
    "Finding",
    "FlowPolicy",
    "FlowRole",
    "GlobRule",
    "GlobSyntaxError",
    "HostCapabilities",
    "LaunchCeilings",
    "LaunchFacts",
    "LayerRules",
    "Limits",
    "ListEntryFacts",
    "LoadedFile",
    "PinEntry",
    "PinState",
    "PinStore",
    "PromptGetFacts",
    "Rate",
    "ResourceReadFacts",
    "RootFacts",
    "RootsRequestFacts",
    "SamplingFacts",
    "SandboxSettings",
    "Screened",
    "ServerPolicy",
    "Setting",
    "Source",
    "TaintLedger",
    "TaintMark",
    "TaintedSession",
    "ToolCallFacts",
    "check_elicitation_url",
    "classify",
    "clear_session",
    "compile_glob",
    "compile_linear",
    "decide",
    "egress_lines",
    "env_line",
    "explain",
    "filter_roots",
    "glob_match",
    "hidden_chars",
    "host_process_session",
    "host_session_ended",
    "identity_digest",
    "launch_facts",
    "launch_manifest",
    "load_effective_policy",
    "load_policy_bytes",
    "load_policy_file",
    "parse_rate",
    "principal_session",
    "qualified_name",
    "references",
    "render_visible",
    "resolve_argument_paths",
    "resolve_env",
    "resolve_root",
    "scan_definition",
    "screen_arguments",
    "screen_result",
    "secret_reference",
    "tainted_sessions",
    "take",
    "unpassed_env",
    "unpassed_env_warning",
]
