"""The base of every app's filtersets: query-string filters bounded to what the database
can compare, so an out-of-range value is the caller's 400, not a driver's overflow (a
500 on SQLite: ``?cluster=99999999999999999999``)."""

from __future__ import annotations

from collections import OrderedDict

import django_filters

# The widest integer column of either database (a 64-bit ``BIGINT``).
MIN_FILTER_NUMBER = -(2**63)
MAX_FILTER_NUMBER = 2**63 - 1


class FilterSet(django_filters.FilterSet):
    """``django_filters.FilterSet`` whose number filters, declared or generated from
    ``Meta.fields``, refuse a value outside ``[MIN_FILTER_NUMBER, MAX_FILTER_NUMBER]``."""

    @classmethod
    def get_filters(cls) -> OrderedDict[str, django_filters.Filter]:
        filters = super().get_filters()
        for declared in filters.values():
            if isinstance(declared, django_filters.NumberFilter):
                declared.extra.setdefault("min_value", MIN_FILTER_NUMBER)
                declared.extra.setdefault("max_value", MAX_FILTER_NUMBER)
        return filters
