from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "webapp.runs"
    label = "runs"
    verbose_name = "Training runs"

    def ready(self) -> None:
        # The zero-signal section of a prompt set's Quality tab: added here so datasets never imports runs.
        from webapp.datasets.quality_views import PAGE_SECTIONS, Section
        from webapp.rewards.rollouts import register_run_finder
        from webapp.runs.selectors import rollout_run_dirs
        from webapp.runs.zero_signal_views import SECTION_KEY, section_context

        # Test-runs on a run's stored rollouts: the rewards app reaches run folders through this app's rows.
        register_run_finder(rollout_run_dirs)

        if not any(s.key == SECTION_KEY for s in PAGE_SECTIONS):
            PAGE_SECTIONS.append(Section(SECTION_KEY, "Zero-signal prompts", "runs/_zero_signal.html",
                                         context=section_context))
