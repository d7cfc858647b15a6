"""Hooks and their delivery log for a project: admins only (a hook URL may carry a token)."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core.access import project_access
from webapp.core.api import application_error_response
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.notifications import services
from webapp.notifications.models import EVENTS, Delivery, Hook, HookKind


def delivery_json(d: Delivery) -> dict:
    return {"id": d.pk, "hook": d.hook_id, "hook_name": d.hook.name, "event": d.event, "status": d.status,
            "response_code": d.response_code, "attempts": d.attempts, "error": d.error,
            "created_at": d.created_at.isoformat(), "sent_at": d.sent_at.isoformat() if d.sent_at else None}


class HookSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(choices=HookKind.values)
    url = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="")
    emails = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="")
    events = serializers.ListField(child=serializers.ChoiceField(choices=EVENTS), required=False, default=list)


class HookListApi(APIView):
    serializer_class = HookSerializer

    def get(self, request, slug):
        access = project_access(request.user, slug, Role.ADMIN)
        return Response({"hooks": [services.hook_json(h) for h in Hook.objects.filter(project=access.project)],
                         "events": list(EVENTS)})

    def post(self, request, slug):
        access = project_access(request.user, slug, Role.ADMIN)
        ser = HookSerializer(data=request.data)
        if not ser.is_valid():
            return Response({"detail": "Invalid hook.", "errors": ser.errors}, status=status.HTTP_400_BAD_REQUEST)
        try:
            hook = services.hook_create(project=access.project, user=request.user, **ser.validated_data)
        except ApplicationError as exc:
            return application_error_response(exc)
        # the JSON hook's signing secret is shown once, at creation
        return Response({**services.hook_json(hook), "secret": hook.secret or None}, status=status.HTTP_201_CREATED)


class HookDetailApi(APIView):
    serializer_class = HookSerializer

    def delete(self, request, slug, pk):
        access = project_access(request.user, slug, Role.ADMIN)
        services.hook_delete(hook=get_object_or_404(Hook, pk=pk, project=access.project), user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeliveryListApi(APIView):
    serializer_class = HookSerializer

    def get(self, request, slug):
        access = project_access(request.user, slug, Role.ADMIN)
        qs = Delivery.objects.filter(hook__project=access.project).select_related("hook")[:200]
        return Response({"deliveries": [delivery_json(d) for d in qs]})


class DeliveryResendApi(APIView):
    serializer_class = HookSerializer

    def post(self, request, slug, pk):
        access = project_access(request.user, slug, Role.ADMIN)
        d = get_object_or_404(Delivery, pk=pk, hook__project=access.project)
        return Response(delivery_json(services.delivery_resend(delivery=d, user=request.user)),
                        status=status.HTTP_202_ACCEPTED)
