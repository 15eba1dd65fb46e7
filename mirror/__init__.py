"""Mirror workers: copy topics from one region's brokers to another's, exactly once.

One worker process (``python -m mirror``) serves one leg of a mirror link: it reads the
leg's source partitions in the *from* region and writes partition p of each to partition
p of the same-named topic in the *to* region (``copier``), resuming from what the target
already holds (``resume``), and reports its progress over HTTP (``status``). The control
plane's controller writes its configuration (``config``) and supervises it; the worker
itself talks only to brokers, through the SDK. ``docs/mirror.md`` has the rules.
"""
