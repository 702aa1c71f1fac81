"""What several runtime modules share: asyncio's logger, thresholds and sizes.

One home for each, as CPython keeps its own in ``asyncio/constants.py`` and
``asyncio/log.py``: a second copy of a threshold is a future bug.
"""

from __future__ import annotations

import logging
from typing import Final

#: asyncio's logger: corun's loop and transports report where asyncio's would,
#: so that programs configuring ``logging.getLogger("asyncio")`` see both.
logger: Final = logging.getLogger("asyncio")

#: Writes after a transport's connection was lost are dropped; from this many
#: on, each one is logged (asyncio's ``LOG_THRESHOLD_FOR_CONNLOST_WRITES``).
LOG_THRESHOLD_FOR_CONNLOST_WRITES: Final = 5

#: The most one read takes: the size of a loop's read buffer (more than any
#: UDP payload), of a TLS connection's ciphertext buffer, and of a pipe read.
READ_BUFFER_SIZE: Final = 256 * 1024

#: asyncio's defaults for the TLS handshake and shutdown, in seconds.
SSL_HANDSHAKE_TIMEOUT: Final = 60.0
SSL_SHUTDOWN_TIMEOUT: Final = 30.0
