from webapp.core.admin_utils import register_app_models

register_app_models("notifications")
