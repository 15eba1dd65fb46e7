"""The project's URLs plus a stand-in for sign-in's entry point (where the branch under
test has no sign-in yet), so the redirect to it can be checked."""

from django.http import HttpRequest, HttpResponse
from django.urls import path

from controlplane import urls as project_urls


def sign_in(request: HttpRequest) -> HttpResponse:
    return HttpResponse("sign in")


urlpatterns = [
    path("console/auth/authenticate/", sign_in, name="oidc_authentication_init"),
    *project_urls.urlpatterns,
]
handler404 = project_urls.handler404
handler500 = project_urls.handler500
