from django.http import Http404, HttpRequest, HttpResponse


def not_found(request: HttpRequest) -> HttpResponse:
    raise Http404("no such page")  # the console's 404 page (web.middleware)
