"""`LAB ...` statements: drive the ProxySQL admin double over its own wire protocol.

These are statements the product never sends and real ProxySQL would refuse; they let tests and the
demo drive a double that runs in another process. Syntax (case-insensitive command, JSON object
argument optional):

    LAB <COMMAND> [<json object>]

The answer is one row with one column named `lab` holding JSON. A `"endpoint": <port>` key in the
argument targets another endpoint served by the same process. Errors come back as MySQL error 1045
with `ProxySQL Admin Error: LAB ...`. LAB statements are not recorded in the statement log.

Commands (the JSON keys are the keyword arguments of the Python API of the same name):
    LAB HELP
    LAB STATUS                      model, counters, mode, endpoint
    LAB STATEMENTS {"since": 0, "limit": 1000}   the wire log: [{"seq","t","conn","sql"}...]
    LAB CLEAR_STATEMENTS
    LAB SET_MODE {"mode": "normal"|"hang"|"refuse", "latency_ms": 0}
    LAB FAIL_STATEMENTS {"text": "REPLACE INTO mysql_query_rules", "message": "...", "pause": false}
                                    statements containing text (case-insensitive) fail with that
                                    message, as a node of another version or schema would refuse them;
                                    with "pause": true the first such statement is applied and then the
                                    endpoint stops answering (hang mode, its answer held), as a ProxySQL
                                    paused mid-change; "pause": "on_resume" stops answering before it
                                    runs it and runs it when set back to normal, as a ProxySQL stopped
                                    (SIGSTOP) with it in flight (its change then the cluster's newest);
                                    {} clears every injected refusal
    LAB DROP_CONNECTIONS            close every client connection of the endpoint now
    LAB RESTART                     like restarting ProxySQL: config back from disk
    LAB ENDPOINTS                   ports served by this process
    LAB SET_SESSIONS {"hostgroup": 100, "count": 4, "rate": 840, "kind": "write",
                      "pinned_reason": "auto_increment", "pinned_fraction": 1, "busy": 0.97,
                      "prepared_fraction": 0, "user": "app", "schema": "sbtest", "reconnect": true}
    LAB CLEAR_SESSIONS {"hostgroup": 100}
    LAB CUT_SESSIONS {"hostgroup": 100, "hostname": "127.0.0.1", "port": 3311}
    LAB SET_SERVER {"hostgroup": 100, "hostname": "127.0.0.1", "port": 3311, "conn_used": 7}
    LAB SET_MIRROR {"latency_ms": 5, "extra_rate": 0}
    LAB SET_DIGESTS {"count": 100000, "queries": 1000000, "latency": 3.0}   latency: a factor on every
                                    digest's time per query from now
    LAB SET_GLOBAL {"name": "Slow_queries", "value": 42}
    LAB TAKE_HOLDS {"hostgroup": 100}   ms each held query waited, since the last TAKE_HOLDS
    LAB SHUN_STATE                  per runtime server: configured_status (memory's) and status (shown,
                                    SHUNNED after connection errors on this endpoint), conn_err,
                                    hostgroup_used (its sessions need connections), error_age_s and
                                    recovery_wait_s while shunned, and the latest probe of the backend
                                    ({"ok", "age_s", "error"}, shared by every endpoint of the process)
"""

import json

from . import engine as engine_mod
from .engine import ON_RESUME

MODEL_COMMANDS = (
    "set_sessions",
    "clear_sessions",
    "cut_sessions",
    "set_server",
    "set_mirror",
    "set_digests",
    "set_global",
    "take_holds",
    "shun_state",
)


def _result(doc):
    r = engine_mod.Result(columns=["lab"], rows=[(json.dumps(doc, sort_keys=True, default=str),)])
    return r


def _error(msg):
    return engine_mod.Result(error=(engine_mod.ERR_CODE, f"ProxySQL Admin Error: LAB {msg}"))


def run(engine, rest):
    name, _, arg = rest.partition(" ")
    name = name.strip().lower()
    arg = arg.strip()
    try:
        args = json.loads(arg) if arg else {}
    except ValueError as e:
        return _error(f"argument is not JSON: {e}")
    if not isinstance(args, dict):
        return _error("argument must be a JSON object")
    target = engine
    if "endpoint" in args:
        port = int(args.pop("endpoint"))
        target = engine_mod.REGISTRY.get((engine_mod._norm_host(engine.host), port))
        if target is None:
            return _error(f"no endpoint on port {port} in this process")
    try:
        return _result(dispatch(target, name, args))
    except (TypeError, ValueError, KeyError) as e:
        return _error(f"{name}: {e}")


def dispatch(engine, name, args):
    with engine.lock:
        if name in ("", "help"):
            return {
                "commands": [
                    "help",
                    "status",
                    "statements",
                    "clear_statements",
                    "set_mode",
                    "fail_statements",
                    "drop_connections",
                    "restart",
                    "endpoints",
                    *MODEL_COMMANDS,
                ],
                "doc": __doc__,
            }
        if name == "status":
            return status(engine)
        if name == "statements":
            since = int(args.get("since", 0))
            limit = int(args.get("limit", 100000))
            rows = [e for e in engine.log if e["seq"] > since]
            return rows[:limit]
        if name == "clear_statements":
            engine.log.clear()
            return True
        if name == "set_mode":
            mode = args.get("mode", engine.mode)
            if mode not in ("normal", "hang", "refuse"):
                raise ValueError("mode must be normal, hang or refuse")
            engine_mod.advance_cluster()  # the cluster checks before the pause (or resume) ran as they were
            engine.mode = mode
            if mode == "normal":
                engine_mod.resume_cluster(engine)
            if "latency_ms" in args:
                engine.latency_ms = float(args["latency_ms"] or 0)
            for cb in engine.mode_listeners:
                cb(engine, "mode")
            return {"mode": engine.mode, "latency_ms": engine.latency_ms}
        if name == "fail_statements":
            if not args:
                engine.failing = []
            else:
                pause = args.get("pause")
                engine.failing.append(
                    (
                        str(args["text"]),
                        str(args.get("message") or 'near "?": syntax error'),
                        ON_RESUME if pause == ON_RESUME else bool(pause),
                    )
                )
            return [list(f) for f in engine.failing]
        if name == "drop_connections":
            for cb in engine.mode_listeners:
                cb(engine, "drop")
            return True
        if name == "restart":
            engine.restart()
            return True
        if name == "endpoints":
            return sorted(port for (_h, port) in engine_mod.REGISTRY)
        if name in MODEL_COMMANDS:
            return getattr(engine.traffic, name)(**args)
        raise ValueError(f"unknown command {name!r}; LAB HELP lists them")


def status(engine):
    doc = engine.traffic.status()
    doc.update(
        {
            "endpoint": {
                "host": engine.host,
                "port": engine.port,
                "mode": engine.mode,
                "latency_ms": engine.latency_ms,
                "datadir": engine.datadir,
                "statements_logged": engine.log_seq,
            },
            "double": engine.profile.banner,
            # ProxySQL Cluster: whether its cluster thread runs, and its last pulls (time, module, peer host, port)
            "cluster": {"syncing": engine in engine_mod.SYNCING, "pulls": list(engine.sync_history)[-20:]},
            # runtime_mysql_servers as each LOAD or pull left it: (time, rows), the last 50
            "servers_history": list(engine.servers_history)[-50:],
        }
    )
    return doc
