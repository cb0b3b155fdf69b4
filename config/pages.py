"""Which app adds what to a lower app's page (core.pages), wired here in the composition root so
that the lower app never imports the higher one."""

from core.pages import page_part_register


def page_parts_wire() -> None:
    from deploy.selectors import inference_usage, models_public_for_dataset
    from training.selectors import job_costs

    def billing_job_costs(*, account, **_):
        return job_costs(account=account)

    def billing_inference(*, access, **_):
        return inference_usage(workspace=access.workspace)

    def public_dataset_models(*, dataset, **_):
        return models_public_for_dataset(dataset=dataset)

    page_part_register("billing_page", "job_costs", billing_job_costs)
    page_part_register("billing_page", "inference", billing_inference)
    page_part_register("public_dataset_page", "public_models", public_dataset_models)
