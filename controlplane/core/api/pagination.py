from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    """``?limit=&offset=``; at most 1,000 rows a page."""

    default_limit = 50
    max_limit = 1000
