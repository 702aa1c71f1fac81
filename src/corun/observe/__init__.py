"""corun.observe: see inside a running corun loop, from inside and from outside the process."""
