"""A tenant's delayed records and its consumer groups' retries and dead letters.

``Delayed``: what waits (in all, by topic, by timer partition) and the scheduled records
by due time, a page at a time, each with a cancel button (developers). ``Retries``: the
groups' retry policies, with a form to declare one; a policy's page shows its settings
and its dead letters (one partition, a page at a time) with boxes to pick some and
replay them to the topics they came from, and deletes the policy with the group's name
typed. One dead letter's page shows its headers and reason.

The tenant's members read; its developers change (the REST API's rules). Writes go
through the API's serializers and the services, so a form refuses what the API refuses
with its messages. Policies are looked up within the URL's tenant only, so another
tenant's is a 404 like a missing one; brokers that do not answer make the page say so
(503)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from controlplane.core.errors import DomainError, InvalidRequest, NotFound, Unavailable
from controlplane.delays import services as delays
from controlplane.retries import services as retries
from controlplane.retries.api.serializers import RetryPolicyCreateSerializer
from controlplane.retries.api.views import RetryPolicyViewSet
from controlplane.retries.models import RetryPolicy
from dataplane.delays import DelayedId
from dataplane.errors import MeridianError
from web.access import Console, console_of, tenant_page
from web.forms import NON_FIELD, FormState, submit, typed_confirmation
from web.views.topics import check_form_tenant

CREATE_FIELDS = ("group", "max_attempts", "backoff_initial_ms", "backoff_multiplier",
                 "backoff_max_ms", "partitions")  # fmt: skip
CHANGE = RetryPolicyViewSet.write_role
BROKERS_DOWN = "the brokers did not answer; nothing was changed"


# What a cancel came to, by the code its redirect carries (the page says it in its own
# words: nothing typed into a link is shown back).
CANCEL_OUTCOMES = {
    "done": "cancelled {id}",
    "gone": "{id} is no longer pending",
    "delivered": "{id} was already delivered",
    "down": BROKERS_DOWN,
}


def _cancel_outcome(query: Any) -> str:
    """The message for a cancel's redirect (``cancelled``: a code of ``CANCEL_OUTCOMES``,
    ``id``: a scheduled record's id); "" for anything else."""
    template = CANCEL_OUTCOMES.get(query.get("cancelled", ""))
    if template is None:
        return ""
    try:
        delayed_id = str(DelayedId.parse(query.get("id", "")))
    except MeridianError:
        return BROKERS_DOWN if template == BROKERS_DOWN else ""
    return template.format(id=delayed_id)


def _int(raw: str | None, default: int) -> int:
    return int(raw) if raw and raw.isdigit() and len(raw) <= 18 else default


@tenant_page(write_role=CHANGE)
def delayed_list(request: HttpRequest) -> HttpResponse:
    console = console_of(request)
    topic = request.GET.get("topic") or None
    after = request.GET.get("after")
    try:
        cursor = delays.Cursor.parse(after) if after else None
        summary = delays.pending(console.tenant, topic)
        page = delays.scheduled(console.tenant, topic, limit=50, after=cursor)
    except Unavailable:
        return render(request, "web/delays/list.html", {"unavailable": True}, status=503)
    except DomainError:
        raise Http404("no such page") from None
    context = {
        "summary": summary,
        "page": page,
        "topic": topic or "",
        "cancelled": _cancel_outcome(request.GET),
    }
    return render(request, "web/delays/list.html", context)


@tenant_page(write_role=CHANGE)
def delayed_cancel(request: HttpRequest) -> HttpResponse:
    """POST: cancel the record ``id``, then back to the list saying so."""
    console = console_of(request)
    if request.method != "POST":
        return redirect("web:delayed-list", tenant=console.tenant.slug)
    check_form_tenant(console, request.POST)
    delayed_id = request.POST.get("id", "")
    try:
        delays.cancel(console.tenant, delayed_id, actor=console.actor)
        outcome = "done"
    except (NotFound, InvalidRequest):
        outcome = "gone"
    except delays.DelayedRecordDelivered:
        outcome = "delivered"
    except DomainError:
        outcome = "down"
    url = reverse("web:delayed-list", kwargs={"tenant": console.tenant.slug})
    return redirect(f"{url}?{urlencode({'cancelled': outcome, 'id': delayed_id[:300]})}")


def tenant_policies(console: Console) -> Any:
    return RetryPolicyViewSet.queryset.filter(tenant=console.tenant)


def policy_in_tenant(console: Console, group: str) -> RetryPolicy:
    found = tenant_policies(console).filter(group=group).first() if "\x00" not in group else None
    if found is None:
        raise Http404("no such retry policy")
    return found  # type: ignore[no-any-return]


@tenant_page(write_role=CHANGE)
def retry_list(request: HttpRequest) -> HttpResponse:
    """The policies, and (POST) declaring one."""
    console = console_of(request)
    state = FormState(fields=CREATE_FIELDS)
    if request.method == "POST":
        check_form_tenant(console, request.POST)
        state = FormState.from_post(request.POST, CREATE_FIELDS)
        created = submit(
            RetryPolicyCreateSerializer,
            state,
            lambda valid: retries.create_retry_policy(console.tenant, actor=console.actor, **valid),
        )
        if created is not None:
            return redirect("web:retry-detail", tenant=console.tenant.slug, group=created.group)
    policies = list(tenant_policies(console).order_by("group"))
    status = 422 if state.errors else 200
    return render(request, "web/retries/list.html", {"policies": policies, "form": state},
                  status=status)  # fmt: skip


@tenant_page(write_role=CHANGE)
def retry_detail(request: HttpRequest, group: str) -> HttpResponse:
    return _policy_page(request, policy_in_tenant(console_of(request), group))


def _policy_page(
    request: HttpRequest, policy: RetryPolicy, extra: dict[str, Any] | None = None
) -> HttpResponse:
    partition = _int(request.GET.get("partition"), 0)
    offset = request.GET.get("offset")
    context: dict[str, Any] = {
        "policy": policy,
        "partition": partition,
        "delete_form": FormState(fields=("confirm",)),
        "replay_form": FormState(fields=("record",)),
        **(extra or {}),
    }
    status = 200
    try:
        context["letters"] = retries.dead_letters(
            policy, partition=partition, offset=_int(offset, 0) if offset else None, limit=50
        )
    except Unavailable:
        context["unavailable"] = True
        status = 503
    except NotFound:
        context["letters"] = None
    if context["replay_form"].errors or context["delete_form"].errors:
        status = 422
    return render(request, "web/retries/detail.html", context, status=status)


@tenant_page(write_role=CHANGE)
def retry_replay(request: HttpRequest, group: str) -> HttpResponse:
    """POST: replay the ticked dead letters (``record`` values ``<partition>:<offset>``)."""
    console = console_of(request)
    policy = policy_in_tenant(console, group)
    if request.method != "POST":
        return redirect("web:retry-detail", tenant=console.tenant.slug, group=policy.group)
    check_form_tenant(console, request.POST)
    places = [_place(item) for item in request.POST.getlist("record")]
    state = FormState(fields=("record",))
    outcome = None
    chosen = [p for p in places if p is not None]
    if not chosen:
        state.errors = {NON_FIELD: ["tick the dead letters to replay"]}
    else:
        try:
            outcome = retries.replay_dead_letters(policy, records=chosen, actor=console.actor)
        except Unavailable:
            state.errors = {NON_FIELD: [BROKERS_DOWN]}
        except DomainError as exc:
            state.errors = {NON_FIELD: [exc.message]}
    return _policy_page(request, policy, {"replay_form": state, "replayed": outcome})


def _place(text: str) -> tuple[int, int] | None:
    partition, _, offset = text.partition(":")
    if partition.isdigit() and offset.isdigit() and len(offset) <= 18:
        return int(partition), int(offset)
    return None


@tenant_page(write_role=CHANGE)
def retry_delete(request: HttpRequest, group: str) -> HttpResponse:
    """POST: delete the policy (and its two topics) with the group's name typed."""
    console = console_of(request)
    policy = policy_in_tenant(console, group)
    if request.method != "POST":
        return redirect("web:retry-detail", tenant=console.tenant.slug, group=policy.group)
    check_form_tenant(console, request.POST)
    state = typed_confirmation(request.POST, policy.group, "type the group's name to delete")
    if not state.ok:
        return _policy_page(request, policy, {"delete_form": state})
    retries.delete_retry_policy(policy, actor=console.actor)
    return redirect("web:retry-list", tenant=console.tenant.slug)


@tenant_page(write_role=CHANGE)
def dead_letter_detail(
    request: HttpRequest, group: str, partition: int, offset: int
) -> HttpResponse:
    console = console_of(request)
    policy = policy_in_tenant(console, group)
    try:
        letter = retries.dead_letter(policy, partition, offset)
    except NotFound:
        raise Http404("no such dead letter") from None
    except Unavailable:
        return render(request, "web/retries/letter.html", {"policy": policy, "unavailable": True},
                      status=503)  # fmt: skip
    return render(request, "web/retries/letter.html", {"policy": policy, "letter": letter})
