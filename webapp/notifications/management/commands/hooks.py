"""`python manage.py hooks PROJECT list|add|delete|deliveries|resend ...`: a project's notification hooks
(admins manage them; URLs are shown as scheme and host only)."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from webapp.core.commands import command_user
from webapp.core.models import Project, Role
from webapp.core.services import ApplicationError
from webapp.notifications import services
from webapp.notifications.models import EVENTS, Delivery, Hook, HookKind


class Command(BaseCommand):
    help = "List, add or delete a project's notification hooks; list deliveries and re-send one."

    def add_arguments(self, parser):
        parser.add_argument("project", help="project slug")
        parser.add_argument("action", choices=("list", "add", "delete", "deliveries", "resend"))
        parser.add_argument("--name", default="")
        parser.add_argument("--kind", choices=HookKind.values, default=HookKind.JSON)
        parser.add_argument("--url", default="")
        parser.add_argument("--emails", default="", help="e-mail hooks: comma-separated addresses")
        parser.add_argument("--event", action="append", default=[], choices=EVENTS, dest="events",
                            help="only these events (repeatable; default all)")
        parser.add_argument("--id", type=int, default=None, help="delete: the hook id; resend: the delivery id")
        parser.add_argument("--user", default="", help="username recorded as the actor (an admin of the project)")

    def handle(self, *args, **opts):
        project = Project.objects.filter(slug=opts["project"]).first()
        if project is None:
            raise CommandError(f"There is no project '{opts['project']}'.")
        user = command_user(opts["user"], project, Role.ADMIN)
        action = opts["action"]
        try:
            if action == "add":
                hook = services.hook_create(project=project, user=user, name=opts["name"], kind=opts["kind"],
                                            url=opts["url"], emails=opts["emails"], events=opts["events"])
                self.stdout.write(f"Hook #{hook.pk} {hook.name} added.")
                if hook.secret:
                    self.stdout.write(f"Signing secret (shown once): {hook.secret}")
            elif action == "delete":
                services.hook_delete(hook=self._get(Hook, opts["id"], hook_project=project), user=user)
                self.stdout.write(f"Hook #{opts['id']} deleted.")
            elif action == "resend":
                d = services.delivery_resend(delivery=self._get(Delivery, opts["id"], delivery_project=project),
                                             user=user)
                self.stdout.write(f"Delivery #{d.pk} queued.")
            elif action == "deliveries":
                for d in Delivery.objects.filter(hook__project=project).select_related("hook")[:50]:
                    self.stdout.write(f"#{d.pk} {d.created_at:%Y-%m-%d %H:%M} {d.event:<20} {d.hook.name:<20} "
                                      f"{d.status:<8} code {d.response_code} attempts {d.attempts} {d.error}")
            else:
                for h in Hook.objects.filter(project=project):
                    j = services.hook_json(h)
                    self.stdout.write(f"#{j['id']} {j['name']:<20} {j['kind']:<6} {j['url'] or j['emails']} "
                                      f"events: {', '.join(j['events']) or 'all'}")
        except ApplicationError as exc:
            raise CommandError(exc.message) from None

    @staticmethod
    def _get(model, pk, *, hook_project=None, delivery_project=None):
        if pk is None:
            raise CommandError("Give --id.")
        qs = model.objects.filter(pk=pk)
        qs = qs.filter(project=hook_project) if hook_project else qs.filter(hook__project=delivery_project)
        obj = qs.first()
        if obj is None:
            raise CommandError(f"There is no {model.__name__.lower()} #{pk} in this project.")
        return obj
