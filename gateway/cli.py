"""The `gateway` command: serve, worker, reindex, import, check-config, rotate-key,
fake-upstream."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import signal
import sys
from pathlib import Path
from typing import NoReturn

from gateway.config import Config, load_config
from gateway.errors import ConfigError
from gateway.ops.logs import JsonMessage


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", default="config.yaml", help="default: ./config.yaml")
    serve.add_argument("--host", help="default: server.host of the config (127.0.0.1)")
    serve.add_argument("--port", type=int, help="default: server.port of the config (8080)")
    serve.add_argument("--workers", type=int, help="default: server.workers of the config")
    serve.add_argument("--log-level", default="info")

    worker = commands.add_parser(
        "worker", help="apply recorded turns and derive memory (recorder.mode: external); "
                       "`serve` starts one itself by default")
    worker.add_argument("--config", default="config.yaml", help="default: ./config.yaml")
    worker.add_argument("--log-level", default="info")

    check = commands.add_parser("check-config", help="validate a config file and exit")
    check.add_argument("path", nargs="?", default="config.yaml")

    rotate = commands.add_parser(
        "rotate-key", help="seal every stored text of a tenant with its current key "
                           "(encryption.key_env), opening old ones with previous_key_env")
    rotate.add_argument("--config", default="config.yaml", help="default: ./config.yaml")
    rotate.add_argument("--tenant", required=True)
    reindex = commands.add_parser(
        "reindex", help="re-embed stored memory with the configured embedder (after changing "
                        "memory.embedder); safe while gateways run, resumable")
    reindex.add_argument("--config", default="config.yaml", help="default: ./config.yaml")
    reindex.add_argument("--tenant", action="append", dest="tenants", metavar="TENANT",
                         help="only this tenant (repeatable; default: every tenant with "
                              "memory enabled)")
    reindex.add_argument("--status", action="store_true",
                         help="print each tenant's re-index progress and exit")
    reindex.add_argument("--log-level", default="warning")

    importing = commands.add_parser(
        "import", help="import a history file (ChatGPT's conversations.json, or the LoCoMo "
                       "schema) into a user's conversations, as if recorded live")
    importing.add_argument("file", help="the JSON file")
    importing.add_argument("--config", default="config.yaml", help="default: ./config.yaml")
    importing.add_argument("--tenant", required=True)
    importing.add_argument("--user", required=True)
    importing.add_argument("--conversation", help="the conversation id (a file of several: "
                                                  "their prefix, `C.<id in the file>`); "
                                                  "default: the file's ids")
    importing.add_argument("--format", choices=("chatgpt", "locomo"),
                           help="default: chatgpt if the file's conversations have a `mapping`")
    importing.add_argument("--log-level", default="warning")

    fake = commands.add_parser("fake-upstream",
                               help="run the fake OpenAI-compatible upstream on its own")
    fake.add_argument("--host", default="127.0.0.1")
    fake.add_argument("--port", type=int, default=9000)

    bench = commands.add_parser("bench", add_help=False,
                                help="run a benchmark from bench/ (locomo, overhead, ...)")
    bench.add_argument("rest", nargs=argparse.REMAINDER)

    args = parser.parse_args(argv)
    if args.command == "bench":
        sys.exit(_bench(args.rest))
    if args.command == "check-config":
        sys.exit(_check(args.path))
    if args.command == "fake-upstream":
        from gateway.upstream.fake_server import run_fake_upstream

        run_fake_upstream(args.host, args.port)
        return
    if args.command == "worker":
        _worker(args)
        return
    if args.command == "rotate-key":
        sys.exit(_rotate_key(args.config, args.tenant))
    if args.command == "reindex":
        sys.exit(_reindex(args))
    if args.command == "import":
        sys.exit(_import(args))
    _serve(args)


def _bench(argv: list[str]) -> int:
    """`gateway bench X ...` becomes `python -m bench X ...` (this process is replaced, so
    signals and the exit status are the benchmark's own): the benchmarks live beside the package
    in a source checkout, not in the installed package, and the package never imports them.
    Returns 2, with a message, when there is no `bench` to run: not in the current directory
    and not importable."""
    if not Path("bench", "__main__.py").is_file() and importlib.util.find_spec("bench") is None:
        print("gateway bench: run it from a source checkout (the bench/ folder is not "
              "installed with the package)", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "bench", *argv])


def _check(path: str) -> int:
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    from gateway.upstream.providers import litellm_providers, provider_problem

    providers = litellm_providers()
    problems = [f"tenants.{name}.models.{alias}.model: {problem}"
                for name, tenant in sorted(config.tenants.items())
                for alias, route in sorted(tenant.models.items())
                if (problem := provider_problem(route.model, route.litellm_params, providers))]
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    print(f"{path}: OK — store {config.store}, tenants: {', '.join(sorted(config.tenants))}")
    return 0


def _rotate_key(path: str, tenant: str) -> int:
    """Exit status 0 once nothing of the tenant is left under an old key (queued jobs aside:
    reported), 1 if a run again is needed, 2 on a bad config or tenant."""
    import asyncio
    import json

    from gateway.store import connect
    from gateway.store.cluster import key_space
    from gateway.store.embedded import EmbeddedRedisError
    from gateway.store.encryption.keyring import load_encryption
    from gateway.store.encryption.rotation import rotate_tenant
    from gateway.wiring import store_url

    try:
        config = load_config(path)
        if tenant not in config.tenants or config.encryption_for(tenant) is None:
            raise ConfigError(f"tenants.{tenant}: no such tenant with an encryption key")
        url, embedded = store_url(config)
    except (ConfigError, EmbeddedRedisError) as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 2

    async def run() -> dict[str, object]:
        redis = connect(url, cluster=config.store_cluster.enabled)
        try:
            encryption = await load_encryption(config, redis)
            return (await rotate_tenant(redis, encryption, tenant,
                                        key_space(config))).to_json()
        finally:
            await redis.aclose()

    try:
        report = asyncio.run(run())
    except ConfigError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 2
    finally:
        if embedded is not None:
            embedded.stop()
    print(json.dumps(report))
    return 0 if report["remaining"] == 0 else 1


def _config_and_logging(args: argparse.Namespace) -> Config:
    """The config named by `--config` (exit with its error if invalid: before the config is
    read its log format is unknown, so that one message is plain text), logging set up."""
    from gateway.ops.logs import configure_logging
    from gateway.wiring import LOG_LEVEL_ENV

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        sys.exit(f"gateway: {exc}")
    configure_logging(args.log_level, config.server.log_format)
    os.environ[LOG_LEVEL_ENV] = args.log_level  # for uvicorn's worker processes
    return config


def _fail(message: str) -> NoReturn:
    """Exit 1 with `message` logged (in the configured format)."""
    logging.getLogger("gateway").critical(message)
    logging.shutdown()
    sys.exit(1)


def _serve(args: argparse.Namespace) -> None:
    import uvicorn

    from gateway.ops.logs import uvicorn_log_config
    from gateway.store.embedded import EmbeddedRedisError
    from gateway.wiring import CONFIG_ENV, STORE_URL_ENV, store_url

    config = _config_and_logging(args)
    host = args.host or config.server.host
    port = args.port or config.server.port
    workers = args.workers or config.server.workers
    exit_signals = _ExitSignals()
    # The store is started here, once, and shared by every worker process. A signal that
    # arrives meanwhile is held until the store is ours to stop (see _ExitSignals).
    try:
        url, embedded = store_url(config)
    except EmbeddedRedisError as exc:
        _fail(f"gateway: {exc}")
    try:
        _check_keys(config, url)
    except ConfigError as exc:
        if embedded is not None:
            embedded.stop()
        _fail(f"gateway: {exc}")
    os.environ[STORE_URL_ENV] = url
    os.environ[CONFIG_ENV] = str(Path(args.config).resolve())
    supervisor = None
    if embedded is not None:
        from gateway.store.supervisor import StoreSupervisor

        logging.getLogger("gateway").info(JsonMessage(event="embedded_store", url=url))
        # This process started the store, so it alone can reap it: it restarts it after a
        # crash; the serving processes and the worker reconnect to the same socket.
        supervisor = StoreSupervisor(embedded)
        supervisor.start()
    worker = None
    if config.recorder.mode == "process":
        from gateway.wiring import WORKER_ENV
        from gateway.worker import WorkerProcess

        worker = WorkerProcess(Path(args.config).resolve(), args.log_level)
        worker.start()
        os.environ[WORKER_ENV] = "1"
    signalled: int | None = None
    try:
        exit_signals.arm()
        # SIGTERM: stop accepting, give in-flight requests (streams too) the shutdown timeout,
        # then the lifespan drains the recorder and the record buffer (gateway.http.app).
        # http/loop "auto": httptools and uvloop (dependencies) where they are installed.
        uvicorn.run("gateway.http.app:app_from_env", factory=True, host=host, port=port,
                    workers=workers, log_level=args.log_level, access_log=False,
                    log_config=uvicorn_log_config(config.server.log_format),
                    http="auto", loop="auto",
                    timeout_graceful_shutdown=config.server.shutdown_timeout_seconds)
    except _Signalled as exc:
        signalled = exc.signum
    finally:
        # Every way out: a signal, a normal return (several workers: uvicorn's supervisor
        # handles the signals itself), a start-up failure (SystemExit), an unexpected error.
        exit_signals.disarm()
        if worker is not None:
            # After the server: the last requests' turns are enqueued; the worker applies
            # what it can within its drain timeout, then the store may go.
            worker.stop(config.recorder.drain_timeout_seconds * 2 + 15)
        if supervisor is not None:
            supervisor.stop()  # before the store's stop: no restart behind it
        if embedded is not None:
            embedded.stop()
    if signalled is not None:
        if signalled == signal.SIGTERM:
            # A SIGTERM, served: in-flight requests finished, the buffer and the recorder
            # drained, the store stopped. That is the stop a supervisor asked for — status 0
            # (Kubernetes and systemd read 143 as a failure). uvicorn cuts the drain only for
            # a SIGINT during its shutdown, and re-raises that one first; a later signal was
            # only noted (the store's stop is never cut short). A SIGINT ends the process by
            # SIGINT, as Ctrl-C does.
            logging.shutdown()
            sys.exit(0)
        exit_signals.exit_by(signalled)


def _check_keys(config: Config, url: str) -> None:
    """With encryption configured: the keys against the store, before any process starts
    (a wrong key ends `serve` here with one line naming it; every process checks again)."""
    if config.encryption is None and not any(t.encryption for t in config.tenants.values()):
        return
    import asyncio

    from gateway.store import connect
    from gateway.store.encryption.keyring import load_encryption

    async def check() -> None:
        timeout = config.server.store_timeout_seconds
        redis = connect(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                        cluster=config.store_cluster.enabled)
        try:
            await load_encryption(config, redis)
        finally:
            await redis.aclose()

    asyncio.run(check())


def _worker(args: argparse.Namespace) -> None:
    from gateway.store.embedded import EmbeddedRedisError
    from gateway.wiring import routing_upstream, store_url
    from gateway.worker import serve_worker

    config = _config_and_logging(args)
    try:
        url, embedded = store_url(config)
    except EmbeddedRedisError as exc:
        _fail(f"gateway: {exc}")
    supervisor = None
    if embedded is not None:  # started here, not by a `gateway serve`: supervised here
        from gateway.store.supervisor import StoreSupervisor

        supervisor = StoreSupervisor(embedded)
        supervisor.start()
    try:
        serve_worker(config, url, routing_upstream(config))
    finally:
        if supervisor is not None:
            supervisor.stop()
        if embedded is not None:
            embedded.stop()


def _reindex(args: argparse.Namespace) -> int:
    import asyncio

    from gateway.memory.embedders import embedder_from_config
    from gateway.memory.jobs.reindex import reindex_command
    from gateway.memory.records.keys import MemoryKeySpace
    from gateway.memory.search.embedding import EmbeddingService
    from gateway.store import connect
    from gateway.store.cluster import key_space
    from gateway.store.embedded import EmbeddedRedisError
    from gateway.store.encryption.keyring import load_encryption
    from gateway.wiring import store_url

    config = _config_and_logging(args)
    enabled = sorted(n for n, t in config.tenants.items() if t.memory.enabled)
    tenants = args.tenants or enabled
    if unknown := sorted(set(tenants) - set(enabled)):
        print(f"gateway reindex: no tenant with memory enabled named {', '.join(unknown)}",
              file=sys.stderr)
        return 2
    try:
        url, embedded = store_url(config)  # shares a running gateway's embedded store
    except EmbeddedRedisError as exc:
        sys.exit(f"gateway: {exc}")
    e = config.memory.embedder
    embedding = EmbeddingService(embedder_from_config(e.backend, e.model, e.threads))

    async def run() -> int:
        redis = connect(url, max_connections=4, cluster=config.store_cluster.enabled)
        try:
            return await reindex_command(embedding, redis, tenants,
                                         context=config.memory.index.context_vectors,
                                         status_only=args.status,
                                         write=lambda line: print(line, flush=True),
                                         encryption=await load_encryption(config, redis),
                                         keys=MemoryKeySpace(key_space(config)))
        finally:
            await redis.aclose()

    try:
        return asyncio.run(run())
    finally:
        embedding.close()
        if embedded is not None:
            embedded.stop()


def _import(args: argparse.Namespace) -> int:
    """`gateway import`: one JSON line per conversation; exit 0 if every one was imported, 1
    if one was refused (it says why), 2 on a bad config, tenant, id or file.

    In process, through the endpoint's service (gateway/memory/importing.py): it needs the
    config the operator has (store, encryption keys), not a tenant's API key, and no size
    limit. The turns wait durably in the store's record queue until a gateway or
    `gateway worker` applies them and derives their memory."""
    import asyncio
    import json

    from gateway.core.history_import import ImportConflict, ImportProblem, parse_messages
    from gateway.core.ids import ConversationKey, valid_id
    from gateway.memory.import_formats import FileConversation, guess_format, read_history
    from gateway.memory.importing import HistoryImport, ImportErased
    from gateway.store import RedisStore, connect
    from gateway.store.cluster import key_space
    from gateway.store.embedded import EmbeddedRedisError
    from gateway.store.encryption.keyring import load_encryption
    from gateway.wiring import store_url

    config = _config_and_logging(args)
    problem = (f"no tenant {args.tenant!r} in {args.config}" if args.tenant not in config.tenants
               else f"not a valid user id: {args.user!r}" if not valid_id(args.user)
               else None)
    try:
        with open(args.file, encoding="utf-8") as f:
            data = json.load(f)
        conversations = read_history(data, args.format or guess_format(data))
        batches = [(c, parse_messages(list(c.messages), limit=max(1, len(c.messages))))
                   for c in conversations if c.messages]
    except (OSError, ValueError) as exc:
        problem = problem or f"{args.file}: {exc}" + (
            f" (at {exc.param})" if isinstance(exc, ImportProblem) and exc.param else "")
    if problem is not None:
        print(f"gateway import: {problem}", file=sys.stderr)
        return 2

    def conversation_id(c: FileConversation) -> str:
        if args.conversation is None:
            return c.id
        return args.conversation if len(batches) == 1 else f"{args.conversation}.{c.id}"

    ids = [conversation_id(c) for c, _ in batches]
    if bad := [i for i in ids if not valid_id(i)]:
        print(f"gateway import: not a valid conversation id: {bad[0]!r}", file=sys.stderr)
        return 2
    try:
        url, embedded = store_url(config)
    except EmbeddedRedisError as exc:
        sys.exit(f"gateway: {exc}")

    async def run() -> int:
        redis = connect(url, max_connections=4, cluster=config.store_cluster.enabled)
        refused = 0
        try:
            store = RedisStore(redis, key_space(config),
                               encryption=await load_encryption(config, redis))
            importer = HistoryImport(store)
            for (_, messages), conversation in zip(batches, ids):
                key = ConversationKey(args.tenant, args.user, conversation)
                try:
                    line = (await importer.run(key, messages)).to_json()
                except ImportConflict as exc:
                    refused += 1
                    line = {"conversation": conversation, "refused": f"{exc}; import into "
                                                                     "another conversation id"}
                except ImportErased:
                    refused += 1
                    line = {"conversation": conversation, "refused": "the user's memory was "
                            "erased (or the conversation deleted) after some of its messages "
                            "were written"}
                print(json.dumps(line, ensure_ascii=False), flush=True)
        finally:
            await redis.aclose()
        return 1 if refused else 0

    try:
        return asyncio.run(run())
    finally:
        if embedded is not None:
            embedded.stop()


class _Signalled(BaseException):
    """SIGTERM or SIGINT ended the server; raised so that cleanup runs before the exit."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _ExitSignals:
    """SIGTERM and SIGINT handling around uvicorn, so that every exit stops the store.

    uvicorn catches these signals itself while it serves and, after its graceful shutdown,
    restores the handlers it found and re-raises the signal. With Python's default SIGTERM
    disposition that re-raise kills the process on the spot, skipping every `finally` — the
    embedded store was left running. The handler installed here is the one uvicorn finds: it
    turns the re-raised signal into `_Signalled`, so the caller stops the store and then exits
    by the same signal (the exit status a supervisor expects). Before `arm()` (the store is
    starting) and after `disarm()` (it is stopping) a signal is only noted: a second signal
    never cuts the store's stop short; the stop itself is bounded.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.received: list[int] = []
        self._armed = False
        for signum in self.SIGNALS:
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        if self._armed:
            self._armed = False
            raise _Signalled(signum)
        logging.getLogger("gateway").info(
            JsonMessage(event="signal_deferred", signal=signal.Signals(signum).name))

    def arm(self) -> None:
        self._armed = True
        if self.received:  # arrived while the store was starting
            self._armed = False
            raise _Signalled(self.received[0])

    def disarm(self) -> None:
        self._armed = False
        for signum in self.SIGNALS:
            signal.signal(signum, self._handle)

    @staticmethod
    def exit_by(signum: int) -> None:
        logging.shutdown()
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
        sys.exit(128 + signum)  # not reached: the default disposition ends the process


if __name__ == "__main__":
    main()
