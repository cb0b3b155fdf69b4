"""JSON API for a workspace's credits: the balance and the ledger (read scope).

Amounts are integer micro-credits (1 credit = 1,000,000 micro-credits = 1 US dollar).
"""

from datetime import datetime

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.pagination import paginate

from billing import ledger, selectors
from workspaces.api import api_access
from workspaces.permissions import Perm

router = Router(tags=["billing"])


class BalanceOut(Schema):
    workspace: str
    balance: int = Field(description="Micro-credits, including those held.")
    held: int = Field(description="Micro-credits set aside for running jobs.")
    available: int = Field(description="Micro-credits that can be spent: balance − held.")
    updated_at: datetime


class EntryOut(Schema):
    id: int
    kind: str
    amount: int = Field(description="Signed micro-credits.")
    balance_after: int
    held_after: int
    job_id: int | None
    payment_ref: str
    reason: str
    created_at: datetime


@router.get("/workspaces/{slug}/billing/balance", response=BalanceOut)
def balance_get(request: HttpRequest, slug: str):
    access = api_access(request, slug, Perm.READ)
    account = ledger.account_for(access.workspace)
    return BalanceOut(
        workspace=access.workspace.slug,
        balance=account.balance,
        held=account.held,
        available=account.available,
        updated_at=account.updated_at,
    )


@router.get("/workspaces/{slug}/billing/ledger", response=list[EntryOut])
@paginate
def ledger_list(request: HttpRequest, slug: str):
    """Newest first."""
    access = api_access(request, slug, Perm.READ)
    return selectors.ledger_entry_list(account=ledger.account_for(access.workspace))


# The same, as the issue names them: /api/v1/billing/balance?workspace=<slug>.
@router.get("/billing/balance", response=BalanceOut)
def balance_get_by_query(request: HttpRequest, workspace: str):
    return balance_get(request, workspace)


@router.get("/billing/ledger", response=list[EntryOut])
@paginate
def ledger_list_by_query(request: HttpRequest, workspace: str):
    """Newest first."""
    access = api_access(request, workspace, Perm.READ)
    return selectors.ledger_entry_list(account=ledger.account_for(access.workspace))
