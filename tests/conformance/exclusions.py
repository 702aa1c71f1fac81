"""Known conformance gaps of corun against CPython's asyncio suites.

Maps a test to the reason it is excluded.  Keys, most specific first:

* ``"test_tasks::CorunTask_CorunFuture_Tests::test_foo"`` -- one test
  (``<CPython module>::<class>::<method>``);
* ``"test_tasks::CorunTask_CorunFuture_Tests"`` -- a whole class;
* ``"test_ssl"`` -- a whole CPython module;
* a full pytest node id (``tests/conformance/test_cpython_tasks.py::...``).

An excluded test is marked ``xfail(strict=True)``: it still runs, it must
still fail, and it turns into a failure the day it starts passing.  Tests that
hang or crash the process cannot run at all; prefix their reason with
``"skip: "`` to skip them instead.  Nothing is dropped silently: every
exclusion shows up as xfailed/skipped with its reason in the pytest summary.

Exclusions apply only when running against corun, never to the stdlib
baseline (``CORUN_CONFORMANCE_LOOP=asyncio``).

Only tests that read (or replace) private attributes of the stdlib's own loop
belong here, and tests of asyncio's deprecated child watchers where the
outcome depends on the loop consulting them: corun is not a ``BaseEventLoop``
and has no reason to grow ``_selector`` or ``_sendfile_native``, and it watches
its children through pidfds.  Each reason names the attribute and the
line of ``Lib/test/test_asyncio/<module>.py`` that uses it (CPython 3.11.7 unless
the reason names versions; tests only newer versions have are keyed by node id).
A behaviour that corun gets wrong is a bug to fix, not an exclusion.
"""

SKIP_PREFIX = "skip: "

_MULTIPLE_HOSTS = (
    "patches asyncio.base_events.socket and replaces the stdlib loop's private "
    "loop._start_serving/loop._stop_serving (test_events.py:800-821): it unit-tests "
    "BaseEventLoop.create_server's internals, not the loop API"
)

_EVENTS = "tests/conformance/test_cpython_events.py"
_SUBPROCESS = "tests/conformance/test_cpython_subprocess.py"

_THREADSAFE_HANDLE = (
    "skip: asserts, in the thread that then stops the loop, that "
    "call_soon_threadsafe() returned asyncio's private events._ThreadSafeHandle "
    "(test_events.py:369, 397, 457, 3.14 and 3.15). On corun's handle the "
    "assertion fails, the thread dies before it stops the loop (or sets the event "
    "the loop blocks on), and the test hangs: skipped. Note: the behaviour these "
    "tests also check, 3.14's lock that makes cancel()/cancelled() from another "
    "thread wait for a running callback, is not in corun's handle (engine)"
)

# TLS tests that exist only in newer CPythons are keyed by node id: such keys
# are not reported as "matches no test" on the versions that lack them.
_SSL = "tests/conformance/test_cpython_ssl.py"
_SSLPROTO = "tests/conformance/test_cpython_sslproto.py"

EXCLUSIONS: dict[str, str] = {
    # --- network suites
    "test_events::CorunEventLoopTests::test_create_server_multiple_hosts_ipv4": _MULTIPLE_HOSTS,
    "test_events::CorunEventLoopTests::test_create_server_multiple_hosts_ipv6": _MULTIPLE_HOSTS,
    "test_events::CorunEventLoopTests::test_prompt_cancellation": (
        "calls the stdlib loop's private loop._stop_serving(r) after the check "
        "(test_events.py:1681)"
    ),
    "test_events::CorunEventLoopTests::test_timeout_rounding": (
        "reads the stdlib loop's private loop._selector (and loop._clock_resolution) "
        "to build its assertion message (test_events.py:1708-1709); the check itself, "
        "<= 20 _run_once calls, holds on corun (12)"
    ),
    "test_events::CorunEventLoopTests::test_internal_fds": (
        "skip: reads the stdlib loop's private loop._internal_fds, loop._csock and "
        "loop._ssock (test_events.py:1361-1365); it skips itself on any loop that "
        "is not a selector_events.BaseSelectorEventLoop"
    ),
    "test_sendfile::CorunSendfileTests::test_sendfile_force_unsupported_native": (
        "replaces the stdlib loop's private loop._sendfile_native with "
        "base_events.BaseEventLoop._sendfile_native (test_sendfile.py:347-352)"
    ),
    # --- TLS (CPython 3.13 and later)
    f"{_SSL}::TestSSL::test_remote_shutdown_receives_trailing_data_on_slow_socket": (
        "skip: reads the stdlib transport's private _read_ready_cb and replaces its "
        "_sock (test_ssl.py:1546-1565, 3.13 to 3.15) from inside a patched "
        "transport.write(); on corun's StreamTransport that raises AttributeError, "
        "the connection is closed with it, and the test then waits without a timeout "
        "(its server thread in recv(), the loop on a future only that thread sets): "
        "a hang, so skipped. The same test without the patch, "
        "test_remote_shutdown_receives_trailing_data, passes"
    ),
    f"{_SSLPROTO}::SslProtoHandshakeTests::test_connection_lost_when_busy": (
        "calls the stdlib loop's private loop._make_socket_transport() to put the "
        "stdlib's SSLProtocol on a mocked socket (test_sslproto.py:184, 3.13 to 3.15)"
    ),
    f"{_SSLPROTO}::CorunStartTLSTests::test_create_connection_ssl_failed_certificate_no_cycles": (
        "patches the stdlib's private sslproto.SSLProtocol.connection_made to find "
        "the transport (test_sslproto.py:853-857, 3.14 and 3.15), which corun's TLS "
        "does not use, so it finds none; the same check on corun's own TLS is "
        "tests/runtime/test_tls.py::test_no_cycles_after_failed_handshake"
    ),
    "test_subprocess::GenericWatcherTests::test_create_subprocess_fails_with_inactive_watcher": (
        "asserts the stdlib loop's private use of the policy's child watcher "
        "(watcher.__enter__().is_active(), test_subprocess.py:819-823); corun "
        "watches each child through its own pidfd and never consults child "
        "watchers, by design (no global SIGCHLD handling)"
    ),
    "test_subprocess::SubprocessFastWatcherTests": (
        "skip: attaches asyncio's deprecated FastChildWatcher to the loop "
        "(test_subprocess.py:748-750), whose SIGCHLD callback reaps every child of "
        "the process with waitpid(-1). The stdlib loop gets the status back because it "
        "registers its children with that watcher; corun never consults watchers, and "
        "since it spawns children off the loop's thread, a child that exits at once is "
        "now and then reaped by the watcher before corun's pidfd sees it (1 or 2 of 29 "
        "tests a run, measured), and reported as 255, as for any child reaped by someone "
        "else. Racy, so skipped rather than xfailed; the same tests pass with the other "
        "watchers (Threaded, Safe, Pidfd)"
    ),
    # --- network suites of newer CPythons, keyed by node id (not reported as
    # "matches no test" on the versions that lack them)
    **{
        f"{_EVENTS}::CorunEventLoopTests::{name}": _THREADSAFE_HANDLE
        for name in (
            "test_call_soon_threadsafe_handle_block_check_cancelled",
            "test_call_soon_threadsafe_handle_block_cancellation",
            "test_call_soon_threadsafe_handle_cancel_other_thread",
        )
    },
    **{
        f"{_SUBPROCESS}::{cls}::test_watcher_implementation": (
            "asserts the stdlib loop's private loop._watcher is asyncio's private "
            "unix_events._PidfdChildWatcher (test_subprocess.py:970-974, 3.14 and "
            "3.15); corun watches each child through its own pidfd, with no watcher"
        )
        for cls in ("SubprocessThreadedWatcherTests", "SubprocessPidfdWatcherTests")
    },
    f"{_SUBPROCESS}::SubprocessThreadedWatcherTests::test_pid_not_reaped_before_exit_published": (
        "reads the stdlib loop's private loop._watcher._threads, the threaded "
        "watcher's thread per pid (test_subprocess.py:1037, 3.14 and 3.15), "
        "after patching asyncio's private unix_events.can_use_pidfd; corun has no "
        "watcher threads while pidfds work. What the test guards (the pid stays "
        "reserved until the exit is published) holds: corun reaps on the loop's "
        "thread and sets Popen.returncode at once (transports/subprocess.py)"
    ),
}
