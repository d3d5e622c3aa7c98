"""verl's own defaults against the harness's defaults file.

Usage: python verl_defaults.py VERL_SRC DEFAULTS_YAML

Composes verl's `ppo_trainer` config with Hydra from the verl checkout at VERL_SRC (as
`verl.trainer.main_ppo` does, without overrides) and prints, one JSON object a line, every leaf
of DEFAULTS_YAML whose value differs from verl's: {"key", "harness", "verl"}. A key verl does not
define prints "verl": "<absent>"; a value verl leaves to an interpolation (`${...}`) or marks
mandatory (`???`) is printed with that text. Exit 0 whatever the differences: the caller judges.
"""
import json
import os
import sys

import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf


def leaves(tree, prefix=""):
    for k, v in tree.items():
        path = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict) and v:
            yield from leaves(v, path)
        else:
            yield path, v


def lookup(tree, path):
    for k in path.split("."):
        if not isinstance(tree, dict) or k not in tree:
            return "<absent>"
        tree = tree[k]
    return tree


def main():
    verl_src, defaults = sys.argv[1], sys.argv[2]
    config_dir = os.path.abspath(os.path.join(verl_src, "verl", "trainer", "config"))
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer")
    verl = OmegaConf.to_container(cfg, resolve=False)
    with open(defaults) as f:
        ours = yaml.safe_load(f)
    for key, value in leaves(ours):
        theirs = lookup(verl, key)
        if theirs != value:
            print(json.dumps({"key": key, "harness": value, "verl": theirs}, default=str))


if __name__ == "__main__":
    main()
