"""``python -m dataplane.broker``: the same as the ``meridian-broker`` command."""

from dataplane.broker.main import main

raise SystemExit(main())
