from django.core.management.base import BaseCommand, CommandError

from webapp.core.models import Project
from webapp.registry.services import DEMO_MODELS, build_demo_models


class Command(BaseCommand):
    help = ("Build the tiny demo models (offline, seconds on a CPU) into MODELS_ROOT and register them in a project: "
            "demo-tiny (policy), demo-teacher (distillation teacher), demo-rm-base (reward-model base).")

    def add_arguments(self, parser):
        parser.add_argument("--project", default="demo", help="project slug (default: demo)")
        parser.add_argument("--only", choices=sorted(DEMO_MODELS), action="append",
                            help="build only this model (repeatable)")

    def handle(self, *args, project, only, **options):
        proj = Project.objects.filter(slug=project).first()
        if proj is None:
            raise CommandError(f"No project {project!r}. Create it first (or run `manage.py seed_demo`).")
        entries = build_demo_models(project=proj, names=only, log=lambda m: self.stdout.write(f"  {m}"))
        for e in entries:
            self.stdout.write(self.style.SUCCESS(f"{e.name}: {e.path} ({e.get_kind_display()})"))
