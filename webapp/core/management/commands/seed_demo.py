from django.core.management.base import BaseCommand

from webapp.core import demo


class Command(BaseCommand):
    help = "Create (or complete) the demo login and the demo project. Safe to run again."

    def handle(self, *args, **options):
        demo.seed(log=lambda msg: self.stdout.write(f"  {msg}"))
        self.stdout.write(self.style.SUCCESS(
            f"Demo project '{demo.DEMO_SLUG}' ready; log in as {demo.DEMO_USERNAME} / {demo.DEMO_PASSWORD}"))
