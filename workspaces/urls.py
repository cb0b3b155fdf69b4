from django.urls import path

from workspaces import views

urlpatterns = [
    path("", views.home, name="home"),
    path("workspaces/new/", views.workspace_create, name="workspace_create"),
    path("invite/<str:token>/", views.invitation_accept, name="invitation_accept"),
    path("w/<slug:ws_slug>/", views.workspace_detail, name="workspace_detail"),
    path("w/<slug:ws_slug>/settings/", views.workspace_settings, name="workspace_settings"),
    path("w/<slug:ws_slug>/settings/delete/", views.workspace_delete, name="workspace_delete"),
    path(
        "w/<slug:ws_slug>/settings/transfer/", views.workspace_transfer, name="workspace_transfer"
    ),
    path("w/<slug:ws_slug>/leave/", views.workspace_leave, name="workspace_leave"),
    path("w/<slug:ws_slug>/billing/", views.workspace_billing, name="workspace_billing"),
    path("w/<slug:ws_slug>/members/", views.member_list, name="member_list"),
    path("w/<slug:ws_slug>/members/invite/", views.member_invite, name="member_invite"),
    path("w/<slug:ws_slug>/members/<int:pk>/role/", views.member_role, name="member_role"),
    path("w/<slug:ws_slug>/members/<int:pk>/remove/", views.member_remove, name="member_remove"),
    path(
        "w/<slug:ws_slug>/members/<int:pk>/reviewer/", views.member_reviewer, name="member_reviewer"
    ),
    path(
        "w/<slug:ws_slug>/invitations/<int:pk>/revoke/",
        views.invitation_revoke,
        name="invitation_revoke",
    ),
    path("w/<slug:ws_slug>/projects/", views.project_list, name="project_list"),
    path("w/<slug:ws_slug>/projects/new/", views.project_create, name="project_create"),
    path("w/<slug:ws_slug>/projects/<int:pk>/", views.project_detail, name="project_detail"),
    path("w/<slug:ws_slug>/projects/<int:pk>/edit/", views.project_edit, name="project_edit"),
    path("w/<slug:ws_slug>/projects/<int:pk>/delete/", views.project_delete, name="project_delete"),
    path("w/<slug:ws_slug>/keys/", views.api_key_list, name="api_key_list"),
    path("w/<slug:ws_slug>/keys/<int:pk>/revoke/", views.api_key_revoke, name="api_key_revoke"),
]
