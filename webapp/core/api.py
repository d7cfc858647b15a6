"""Project and member endpoints. Every feature app adds its own under /api/projects/<slug>/."""
from __future__ import annotations

from django.http import Http404
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core import services
from webapp.core.access import project_access, visible_projects
from webapp.core.models import Invitation, Membership, Project, Role


class ProjectSerializer(serializers.ModelSerializer):
    class Meta:
        model = Project
        fields = ["slug", "name", "description", "review_overlap", "review_blind", "created_at"]
        read_only_fields = ["review_overlap", "review_blind", "created_at"]
        extra_kwargs = {"slug": {"required": False, "allow_blank": True, "validators": []}}


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username")

    class Meta:
        model = Membership
        fields = ["id", "username", "role"]


def application_error_response(exc: services.ApplicationError) -> Response:
    return Response({"detail": exc.message, "field": exc.field}, status=status.HTTP_400_BAD_REQUEST)


class ProjectListApi(APIView):
    serializer_class = ProjectSerializer
    def get(self, request):
        projects = visible_projects(request.user).order_by("name")
        return Response(ProjectSerializer(projects, many=True).data)

    def post(self, request):
        ser = ProjectSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        try:
            project = services.project_create(user=request.user, name=ser.validated_data["name"],
                                              slug=ser.validated_data.get("slug", ""),
                                              description=ser.validated_data.get("description", ""))
        except services.ApplicationError as exc:
            return application_error_response(exc)
        return Response(ProjectSerializer(project).data, status=status.HTTP_201_CREATED)


class ProjectDetailApi(APIView):
    serializer_class = ProjectSerializer
    def get(self, request, slug):
        access = project_access(request.user, slug)
        return Response(ProjectSerializer(access.project).data | {"role": access.role})


class MemberInputSerializer(serializers.Serializer):
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices)


class MemberListApi(APIView):
    serializer_class = MembershipSerializer
    def get(self, request, slug):
        access = project_access(request.user, slug)
        return Response(MembershipSerializer(access.project.memberships.select_related("user"), many=True).data)

    def post(self, request, slug):
        """A member's new role (200), or an invitation (202, the same for any username that is not a member) with
        `join_url`, the link to send: it lets them sign in, or create the account, and join (shown once)."""
        access = project_access(request.user, slug, Role.ADMIN)
        ser = MemberInputSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        try:
            outcome = services.member_add(actor=request.user, project=access.project, **ser.validated_data)
        except services.ApplicationError as exc:
            return application_error_response(exc)
        if outcome.membership is not None:
            return Response(MembershipSerializer(outcome.membership).data)
        join_url = request.build_absolute_uri(reverse("join", args=[outcome.join_token]))
        return Response({"detail": outcome.message, "invitation": InvitationSerializer(outcome.invitation).data,
                         "join_url": join_url}, status=status.HTTP_202_ACCEPTED)


class InvitationSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug")

    class Meta:
        model = Invitation
        fields = ["id", "project", "username", "role", "created_at"]


class InvitationListApi(APIView):
    """Invitations waiting for the signed-in account."""

    serializer_class = InvitationSerializer

    def get(self, request):
        return Response(InvitationSerializer(services.invitations_for(request.user), many=True).data)


class InvitationAnswerApi(APIView):
    """Accept (join the project with the invited role) or decline an invitation to the signed-in account."""

    serializer_class = MembershipSerializer

    @extend_schema(request=None, responses={200: MembershipSerializer})
    def post(self, request, pk, answer):
        if answer not in ("accept", "decline"):
            raise Http404("No such answer")
        try:
            membership = services.invitation_answer(user=request.user, invitation_id=pk, accept=answer == "accept")
        except services.ApplicationError:
            raise Http404("No such invitation") from None
        return Response(MembershipSerializer(membership).data if membership else {"detail": "Declined."})
