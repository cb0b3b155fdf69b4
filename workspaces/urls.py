from django.urls import path

from workspaces.views import keys, members, projects, workspaces

W = "w/<slug:ws_slug>/"
urlpatterns = [
    path("", workspaces.home, name="home"),
    path("workspaces/new/", workspaces.workspace_create, name="workspace_create"),
    path("invite/<str:token>/", members.invitation_accept, name="invitation_accept"),
    path(W, workspaces.workspace_detail, name="workspace_detail"),
    path(W + "settings/", workspaces.workspace_settings, name="workspace_settings"),
    path(W + "settings/delete/", workspaces.workspace_delete, name="workspace_delete"),
    path(W + "settings/transfer/", workspaces.workspace_transfer, name="workspace_transfer"),
    path(W + "leave/", workspaces.workspace_leave, name="workspace_leave"),
    path(W + "members/", members.member_list, name="member_list"),
    path(W + "members/invite/", members.member_invite, name="member_invite"),
    path(W + "members/<int:pk>/role/", members.member_role, name="member_role"),
    path(W + "members/<int:pk>/remove/", members.member_remove, name="member_remove"),
    path(W + "members/<int:pk>/reviewer/", members.member_reviewer, name="member_reviewer"),
    path(W + "invitations/<int:pk>/revoke/", members.invitation_revoke, name="invitation_revoke"),
    path(W + "projects/", projects.project_list, name="project_list"),
    path(W + "projects/new/", projects.project_create, name="project_create"),
    path(W + "projects/<int:pk>/edit/", projects.project_edit, name="project_edit"),
    path(W + "projects/<int:pk>/delete/", projects.project_delete, name="project_delete"),
    path(W + "keys/", keys.api_key_list, name="api_key_list"),
    path(W + "keys/<int:pk>/revoke/", keys.api_key_revoke, name="api_key_revoke"),
]
