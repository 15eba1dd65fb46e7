"""The tenant console: server-rendered Django pages mounted by the control plane at
``/console/``. Pages call the control plane's services (the API's validation, audit and
quotas) and read through the API's querysets; ``web.access`` decides who sees what."""
