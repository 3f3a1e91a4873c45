"""Who may talk to a run's sockets: CURVE encryption with pinned server keys, a ZAP
authenticator that admits only the run's client keys, and counts of every refusal.

How it fits: each process makes its ZeroMQ context with :func:`make_context` from its
:class:`SecurityConfig`. ``replay.wire.transport`` then asks this module to arm every socket it
makes (:func:`arm_client`) and binds (:func:`arm_server`); no other module touches a
security option. With keys:

* every connecting socket is a CURVE client with the run's client pair, pinned to the
  run's server public key: an actor never finishes a handshake with a publisher that does
  not hold the server secret, so it never loads a stranger's weights;
* every bound socket is a CURVE server whose connections go through this context's ZAP
  handler (:class:`Gatekeeper`), which admits only ``RunKeys.admitted``.

Refusals are counted by reason (:data:`REFUSAL_REASONS`) and logged once per peer and
reason: ``no_key`` (a peer without CURVE, or one that hung up in the handshake, as a
port scanner does), ``wrong_key`` (a peer that pinned another
server key, or a server that is not the run's, seen from a client), ``not_admitted``
(a valid handshake with a client key the run does not know) and ``handshake`` (any other
failed handshake). A refused peer's connection is closed before any message passes, so it
never reads replay or weights and never writes a priority.

Without keys the context still runs the ZAP handler for what it binds: it admits every
peer (NULL mechanism) but gives each connection its own User-Id, so a server can key its
per-peer state by the connection the transport proves rather than by the sender id a
message claims (``replay.server.senders``).

Exposure rule (:func:`check_exposure`): binding anything but a loopback address without
keys is refused unless ``insecure`` is set, which is logged loudly.
"""

from __future__ import annotations

import ipaddress
import itertools
import logging
import queue
import threading
from dataclasses import dataclass

import zmq
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

from replay.errors import ConfigError
from replay.wire import keys as key_files
from replay.wire.keys import RunKeys

logger = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # fixed by the ZAP RFC (27/ZAP)
ZAP_DOMAIN = b"apex"
REFUSAL_REASONS = ("no_key", "wrong_key", "not_admitted", "handshake")
# How often the gatekeeper looks for new monitors and the stop flag (connections are
# answered at once; this bounds only how late a socket's first refusal may be counted).
GATEKEEPER_POLL_MS = 50
# Distinct (reason, peer) pairs logged; past it refusals are only counted.
MAX_LOGGED_PEERS = 1024
_MONITORED_EVENTS = (
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_MONITOR_STOPPED
)
_monitor_numbers = itertools.count()
_gatekeeper_lock = threading.Lock()  # a context's threads may bind at the same moment


@dataclass(frozen=True)
class SecurityConfig:
    """A process's transport security (a run's ``[security]`` section).

    Attributes:
        keys: directory of the run's CURVE keys (``replay.wire.keys``); None: no encryption.
        insecure: allow binding beyond loopback without keys (logged loudly, recorded in
            the run's config and summary).
    """

    keys: str | None = None
    insecure: bool = False

    def problems(self, prefix: str = "security.") -> list[str]:
        problems = []
        if self.keys is not None and not isinstance(self.keys, str):
            problems.append(f"{prefix}keys must be a directory path, got {self.keys!r}")
        if not isinstance(self.insecure, bool):
            problems.append(f"{prefix}insecure must be true or false, got {self.insecure!r}")
        return problems


def is_loopback(host: str) -> bool:
    """True for addresses only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name or an interface: not provably local
        return False


class RunContext(zmq.Context):
    """A ZeroMQ context that knows the process's keys (None without) and runs the
    :class:`Gatekeeper` of what it binds. Make it with :func:`make_context`."""

    keys: RunKeys | None = None
    insecure: bool = False
    gatekeeper: Gatekeeper | None = None
    stopped_refusals: dict[str, int] | None = None  # a stopped gatekeeper's last counts

    def refusals(self) -> dict[str, int]:
        """Refused connection attempts so far, by reason (every reason present)."""
        if self.gatekeeper is not None:
            return self.gatekeeper.counts()
        return dict(self.stopped_refusals or dict.fromkeys(REFUSAL_REASONS, 0))

    def _stop_gatekeeper(self) -> None:
        if self.gatekeeper is not None:
            self.gatekeeper.stop()
            self.stopped_refusals = self.gatekeeper.counts()
            self.gatekeeper = None

    def term(self) -> None:
        self._stop_gatekeeper()  # its sockets would keep term() waiting forever
        super().term()

    def destroy(self, linger: int | None = None) -> None:
        self._stop_gatekeeper()
        super().destroy(linger)


def make_context(
    config: SecurityConfig | None = None, need_server_secret: bool = True
) -> RunContext:
    """The process's context, armed with the keys ``config`` names.

    Args:
        need_server_secret: False for a process that only connects (an actor).

    Raises:
        KeysError: the keys cannot be used (missing, malformed, readable by others).
    """
    config = config or SecurityConfig()
    context = RunContext()
    try:
        if config.keys is not None:
            context.keys = key_files.load(config.keys, need_server_secret)
        context.insecure = config.insecure
    except ConfigError:
        context.term()
        raise
    return context


def _gatekeeper(context: zmq.Context) -> Gatekeeper | None:
    if not isinstance(context, RunContext):
        return None
    with _gatekeeper_lock:
        if context.gatekeeper is None:
            context.gatekeeper = Gatekeeper(context, context.keys)
        return context.gatekeeper


def arm_client(socket: zmq.Socket) -> None:
    """Makes a new socket a CURVE client pinned to the run's server key (keys only)."""
    context = socket.context
    if not isinstance(context, RunContext) or context.keys is None:
        return
    socket.curve_serverkey = context.keys.server.public
    socket.curve_publickey = context.keys.client.public
    socket.curve_secretkey = context.keys.client.secret


def check_exposure(context: zmq.Context, host: str) -> None:
    """Refuses to bind ``host`` beyond loopback without keys unless insecure is allowed.

    Raises:
        ConfigError: saying how to get keys or to allow it.
    """
    keyed = isinstance(context, RunContext) and context.keys is not None
    if keyed or is_loopback(host):
        return
    if isinstance(context, RunContext) and context.insecure:
        logger.warning(
            "INSECURE: binding %s without keys (--insecure): anyone who reaches this port can "
            "insert, sample, rewrite priorities or read weights",
            host,
        )
        return
    raise ConfigError(
        [
            f"binding {host} without keys: any process that reaches it could read and write "
            "the run; give --keys DIR (apex keys generate DIR), bind 127.0.0.1, or pass "
            "--insecure"
        ],
        "transport security",
    )


def arm_server(socket: zmq.Socket, host: str) -> None:
    """Before a bind: the exposure rule, then CURVE server (keys) and ZAP for the socket.

    Raises:
        ConfigError: :func:`check_exposure`'s refusal, or keys without the server secret.
    """
    context = socket.context
    check_exposure(context, host)
    gatekeeper = _gatekeeper(context)
    if gatekeeper is None:
        return
    keys = context.keys
    if keys is not None:
        if keys.server.secret is None:
            raise ConfigError(
                [f"{keys.directory} has no server.key_secret, and this process binds sockets"],
                "transport security",
            )
        socket.curve_secretkey = keys.server.secret
        socket.curve_publickey = keys.server.public
        socket.curve_server = True
        gatekeeper.watch(socket)
    socket.zap_domain = ZAP_DOMAIN


def peer_id(frame: zmq.Frame) -> str:
    """The connection a received frame came over, as the gatekeeper named it ("" when no
    gatekeeper answered for it, e.g. a plain context's socket)."""
    try:
        return frame.get("User-Id")
    except zmq.ZMQError:
        return ""


class Gatekeeper:
    """The context's ZAP handler and handshake monitor, on one thread.

    ZAP (RFC 27) is asked once per incoming connection: CURVE clients are admitted when
    their key is in ``keys.admitted``; NULL ones (a context without keys) always, each
    with its own User-Id. Monitors of the context's sockets report handshakes that failed
    before ZAP was asked (no key, wrong key).
    """

    def __init__(self, context: zmq.Context, keys: RunKeys | None) -> None:
        self._admitted = (
            {key_files.raw_key(key): key_files.fingerprint(key) for key in keys.admitted}
            if keys is not None
            else {}
        )
        self._keyed = keys is not None
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(REFUSAL_REASONS, 0)
        self._logged: set[tuple[str, str]] = set()
        self._connections = itertools.count(1)
        self._new_monitors: queue.SimpleQueue[tuple[zmq.Socket, str]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._zap = context.socket(zmq.REP)
        self._zap.linger = 0
        self._zap.bind(ZAP_ENDPOINT)
        self._thread = threading.Thread(target=self._run, name="zap", daemon=True)
        self._thread.start()

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def watch(self, socket: zmq.Socket) -> None:
        """Counts the failed handshakes of peers of ``socket``, a server socket (call
        from the socket's own thread)."""
        address = f"inproc://apex-monitor-{next(_monitor_numbers)}"
        socket.monitor(address, _MONITORED_EVENTS)
        monitor = socket.context.socket(zmq.PAIR)
        monitor.linger = 0
        monitor.connect(address)
        # Handed to the gatekeeper's thread, which owns it from here (a queue is the
        # memory barrier ZeroMQ asks for when a socket changes threads).
        self._new_monitors.put((monitor, f"a {zmq.SocketType(socket.type).name} socket"))

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5.0)

    def _refuse(self, reason: str, peer: str) -> None:
        with self._lock:
            self._counts[reason] += 1
            first = (reason, peer) not in self._logged and len(self._logged) < MAX_LOGGED_PEERS
            if first:
                self._logged.add((reason, peer))
        if first:
            logger.warning(
                "refused a connection (%s) from %s; further ones are counted, not logged",
                reason,
                peer,
            )

    def _run(self) -> None:
        monitors: dict[zmq.Socket, str] = {}
        poller = zmq.Poller()
        poller.register(self._zap, zmq.POLLIN)
        try:
            while not self._stopping.is_set():
                while not self._new_monitors.empty():
                    monitor, endpoint = self._new_monitors.get()
                    monitors[monitor] = endpoint
                    poller.register(monitor, zmq.POLLIN)
                for socket, _ in poller.poll(GATEKEEPER_POLL_MS):
                    if socket is self._zap:
                        request = self._zap.recv_multipart()
                        try:
                            self._answer(request)
                        except Exception:  # a REP that never answers would hang every handshake
                            logger.exception("ZAP request not understood; refused")
                            self._zap.send_multipart(
                                [
                                    b"1.0",
                                    request[1] if len(request) > 1 else b"",
                                    b"500",
                                    b"error",
                                    b"",
                                    b"",
                                ]
                            )
                    elif not self._on_event(socket.recv_multipart(), monitors[socket]):
                        poller.unregister(socket)
                        del monitors[socket]
                        socket.close(linger=0)
        finally:  # every socket closed, or the context's term() would wait forever
            while not self._new_monitors.empty():
                monitors[self._new_monitors.get()[0]] = ""
            for monitor in monitors:
                monitor.close(linger=0)
            self._zap.close(linger=0)

    def _on_event(self, frames: list[bytes], endpoint: str) -> bool:
        """Counts a monitor event; False once the monitored socket has closed."""
        event = parse_monitor_message(frames)
        if event["event"] == zmq.EVENT_MONITOR_STOPPED:
            return False
        value = event["value"]
        # A plain (NULL) peer hangs up as soon as it reads our CURVE greeting, so which
        # side sees the mismatch first is a race: a hang-up in the handshake is a no_key.
        if (
            event["event"] == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
            or value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
        ):
            self._refuse("no_key", f"a peer of {endpoint}")
        elif value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
            self._refuse("wrong_key", f"a peer of {endpoint}")
        else:
            self._refuse("handshake", f"a peer of {endpoint} (protocol error {value:#x})")
        return True

    def _answer(self, request: list[bytes]) -> None:
        if len(request) < 6:  # not from libzmq; answer what can be answered
            if len(request) >= 2:
                self._zap.send_multipart([b"1.0", request[1], b"400", b"malformed", b"", b""])
            else:
                self._zap.send_multipart([b"1.0", b"", b"400", b"malformed", b"", b""])
            return
        version, request_id, _domain, address, _identity, mechanism, *credentials = request
        peer = address.decode("ascii", "replace")
        number = next(self._connections)
        if mechanism == b"CURVE" and credentials and credentials[0] in self._admitted:
            status, user = b"200", f"{self._admitted[credentials[0]]}#{number}"
        elif mechanism == b"NULL" and not self._keyed:
            status, user = b"200", f"anon#{number}"
        else:
            curve = mechanism == b"CURVE" and credentials and len(credentials[0]) == 32
            key = key_files.fingerprint(z85.encode(credentials[0])) if curve else "none"
            self._refuse("not_admitted", f"{peer} (key {key})")
            status, user = b"400", ""
        self._zap.send_multipart(
            [
                version,
                request_id,
                status,
                b"OK" if status == b"200" else b"not admitted",
                user.encode("ascii"),
                b"",
            ]
        )
