"""`lmmbench envs list|prune`: the venvs kept under ``$LMMBENCH_HOME/venvs`` for plan rows' requirements;
`lmmbench envs build-image`: the self-contained container image.

The work is in ``lmmbench.executors.venv_cache`` and ``lmmbench.executors.container_lmmbench``; this module parses
and prints.
"""

from __future__ import annotations

import json
import time

import typer

from lmmbench.config.cli_options import command_from_model
from lmmbench.config.envs import EnvsBuildImageConfig, EnvsListConfig, EnvsPruneConfig

__all__ = ["register"]


def _size(n: int | None) -> str:
    if n is None:
        return ""
    return f"{n / 1024**2:.1f} MiB" if n < 1024**3 else f"{n / 1024**3:.2f} GiB"


def _when(epoch_s: float) -> str:
    age = max(0.0, time.time() - epoch_s)
    ago = f"{age:.0f} s ago"
    for unit_s, unit in ((86_400, "d"), (3600, "h"), (60, "min")):
        if age >= unit_s:
            ago = f"{age / unit_s:.0f} {unit} ago"
            break
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(epoch_s))} UTC ({ago})"


def _list(cfg: EnvsListConfig) -> None:
    from rich.console import Console
    from rich.table import Table

    from lmmbench.executors.venv_cache import list_venvs, venvs_dir
    from lmmbench.models.tiny import lmmbench_home

    home = lmmbench_home()
    entries = list_venvs(home)
    if cfg.json_output:
        typer.echo(json.dumps([e.as_json() for e in entries], indent=2))
        return
    if not entries:
        typer.echo(f"no venvs under {venvs_dir(home)}")
        return
    table = Table("key", "requirements", "python", "isolation", "size", "frees", "last used", "in use", box=None)
    for e in entries:
        reqs = " ".join(e.requirements) if e.complete else "(unfinished build)"
        if e.problem is not None:
            reqs = f"(broken: {e.problem}; `lmmbench envs prune` removes it)"
        table.add_row(e.key, reqs or "-", e.python or "", e.isolation or "", _size(e.size_bytes),
                      _size(e.frees_bytes), _when(e.last_used_s), "yes" if e.in_use else "no")  # fmt: skip
    con = Console(width=200, highlight=False)
    con.print(table, markup=False)
    total = sum(e.size_bytes for e in entries)
    con.print(f"{len(entries)} venv(s), {_size(total)} under {venvs_dir(home)}", markup=False)


def _prune(cfg: EnvsPruneConfig) -> None:
    from lmmbench.executors.venv_cache import prune_venvs, venvs_dir
    from lmmbench.models.tiny import lmmbench_home

    home = lmmbench_home()
    result = prune_venvs(home, keep=cfg.keep, older_than_s=cfg.older_than_s, dry_run=cfg.dry_run)
    verb = "would remove" if cfg.dry_run else "removed"
    for e in result.removed:
        why = "unfinished build" if not e.complete else f"last used {_when(e.last_used_s)}"
        typer.echo(f"{verb} {e.key}  {' '.join(e.requirements) or '-'}  {_size(e.size_bytes)}  ({why})")
    in_use = [e.key for e in result.kept if e.in_use]
    typer.echo(f"{verb} {len(result.removed)} venv(s), {result.freed_bytes} bytes "
               f"({_size(result.freed_bytes)}) {'to free' if cfg.dry_run else 'freed'}; kept {len(result.kept)} "
               f"(bound: {result.keep} venvs, {result.max_bytes} bytes) under {venvs_dir(home)}")  # fmt: skip
    if in_use:
        typer.echo(f"in use, kept whatever the bound: {', '.join(in_use)}")


def _build_image(cfg: EnvsBuildImageConfig) -> None:
    import time

    from lmmbench.executors.container import check_engine, engine_command
    from lmmbench.executors.container_lmmbench import build_image, cache_dir
    from lmmbench.executors.container_wheel import lmmbench_wheel, reduce_extras
    from lmmbench.executors.venvs import default_constraints

    cache_dir()  # what the environment names is checked before the engine is asked
    start_ns = time.perf_counter_ns()
    wheel = lmmbench_wheel()
    engine = engine_command()
    check_engine(engine)
    extras = reduce_extras(wheel, cfg.extras_list)
    typer.echo(f"lmmbench {wheel.version} wheel {wheel.path.name} sha256 {wheel.sha256[:16]}; extras "
               f"{','.join(extras) or '-'}", err=True)  # fmt: skip
    tag = build_image(engine, wheel, extras, default_constraints().absolute(), python=cfg.python, base=cfg.base)
    typer.echo(f"image ready in {(time.perf_counter_ns() - start_ns) / 1e9:.1f} s", err=True)
    typer.echo(tag)


def register(app: typer.Typer) -> None:
    """Add ``lmmbench envs ...``."""
    envs = typer.Typer(help="List and prune the venvs kept for plan rows' requirements ($LMMBENCH_HOME/venvs); "
                       "build the self-contained container image.", no_args_is_help=True)  # fmt: skip
    command_from_model(envs, "list", EnvsListConfig, _list, with_config_file=False)
    command_from_model(envs, "prune", EnvsPruneConfig, _prune, with_config_file=False)
    command_from_model(envs, "build-image", EnvsBuildImageConfig, _build_image, with_config_file=False)
    app.add_typer(envs, name="envs")
