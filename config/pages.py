"""Which app adds what to a lower app's page (core.pages), wired here in the composition root so
that the lower app never imports the higher one."""

from core.pages import page_part_register
from workspaces.permissions import Perm


def page_parts_wire() -> None:
    from deploy.exports import exports_panel
    from deploy.selectors import inference_usage, models_public_for_dataset
    from evaluations.selectors import model_evaluations
    from training.selectors import job_costs

    def billing_job_costs(*, account, **_) -> dict:
        return {"job_costs": job_costs(account=account)}

    def billing_inference(*, access, **_) -> dict:
        return {"inference": inference_usage(workspace=access.workspace)}

    def public_dataset_models(*, dataset, **_) -> dict:
        return {"public_models": models_public_for_dataset(dataset=dataset)}

    def model_exports(*, access, model, **_) -> dict:
        return exports_panel(access=access, model=model)

    def model_evaluations_card(*, access, model, **_) -> dict:
        return {
            "evaluations": list(model_evaluations(model=model)[:10]),
            "can_evaluate": access.can(Perm.TRAIN),
        }

    page_part_register("billing_page", "training.job_costs", billing_job_costs)
    page_part_register("billing_page", "deploy.inference", billing_inference)
    page_part_register("public_dataset_page", "deploy.public_models", public_dataset_models)
    page_part_register("model_page", "deploy.exports", model_exports)
    page_part_register("model_page", "evaluations.card", model_evaluations_card)
