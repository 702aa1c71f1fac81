"""corun's runtime: handles, timers, Future, Task, the loop core and epoll I/O."""
