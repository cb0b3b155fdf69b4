"""Print, as JSON on stdout, what the installed Ultralytics accepts as training arguments.

Run as a child process by training.services.arguments.ultralytics_config: importing Ultralytics
pulls in torch (~1 s and ~900 MB), which the web process must not pay to validate a form. This
file is not imported by Kestrel.
"""

import ast
import inspect
import json
import sys
import textwrap


def _optimizers(build_optimizer) -> list[str]:
    """The names BaseTrainer.build_optimizer matches, in its order: a set local to that method,
    which Ultralytics has no name for at run time."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(build_optimizer)))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and [getattr(target, "id", None) for target in node.targets] == ["optimizers"]
            and isinstance(node.value, ast.Set)
        ):
            return [ast.literal_eval(element) for element in node.value.elts]
    raise RuntimeError("BaseTrainer.build_optimizer has no `optimizers` set: Ultralytics changed.")


def main() -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # Ultralytics greets on stdout when it writes its settings file
    from ultralytics import __version__, cfg
    from ultralytics.engine.trainer import BaseTrainer

    json.dump(
        {
            "version": __version__,
            "default_cfg_path": str(cfg.DEFAULT_CFG_PATH),
            "defaults": cfg.DEFAULT_CFG_DICT,
            "float_keys": sorted(cfg.CFG_FLOAT_KEYS),
            "fraction_keys": sorted(cfg.CFG_FRACTION_KEYS),
            "int_keys": sorted(cfg.CFG_INT_KEYS),
            "int_min": cfg.CFG_INT_MIN,
            "bool_keys": sorted(cfg.CFG_BOOL_KEYS),
            "str_keys": sorted(cfg.CFG_STR_KEYS),
            "quantize_aliases": cfg.QUANTIZE_ALIASES,
            "optimizers": _optimizers(BaseTrainer.build_optimizer),
        },
        out,
    )


if __name__ == "__main__":
    main()
