"""Transports: what protocols talk to, on sockets, pipes, child processes and TLS.

``base.py`` holds flow control and the socket transport's common half;
``stream.py`` and ``datagram.py`` build on it, ``pipe.py`` and
``subprocess.py`` on flow control alone, and ``tls.py`` stacks a TLS
protocol and its transport on any stream transport.
"""
