"""What every ``ragfunnel`` command shares: every failure is one line on stderr and exit code 1.

A :class:`~ragfunnel.errors.RagfunnelError` is printed as it is. Anything else that escapes a command —
an ``OSError`` such as a full disk, a ``UnicodeDecodeError``, a JSON error, a bug — is also one line
naming the file (when known) and the problem; ``ragfunnel --debug`` shows the traceback instead.
Ctrl-C and SIGTERM end with exit code 130; a long run says how many rows it saved.

The options several commands take are declared here once: the method and model options of ``ask`` and
``eval``, the limits on files read, the Ray options, ``--timeout``, ``--remote-embedder`` and the ``--task``
check. Options are generated from declared settings (:mod:`ragfunnel.declared`): every method's configuration
(:func:`method_options`), and the settings outside the methods, such as an index's, the reader's limits and the
server's (:func:`declared_option`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from ragfunnel.declared import Config, Option, options_of_config
from ragfunnel.documents import ReadLimits
from ragfunnel.documents.progress import reading_files
from ragfunnel.errors import ConfigError, Interrupted, RagfunnelError
from ragfunnel.journal import left_work_running
from ragfunnel.methods import REGISTRY
from ragfunnel.prompts import check_task

if TYPE_CHECKING:
    from ragfunnel.ray_cluster import RayOptions

C = typing.TypeVar("C", bound=Config)

timeout_option = click.option(
    "--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
    help="openai: servers: wait this long for an answer; a call (retries included) gives up after 1.5x "
         "[default: 300].")


remote_embedder_option = click.option(
    "--remote-embedder", metavar="openai:URL#MODEL",
    help="Trust this embeddings server with the queries (and OPENAI_API_KEY) of an index whose vectors it made. "
         "An index whose manifest names a server is refused without it: a file never chooses where they go.")


_RAY_DEFAULT = "(join or start)"  # --ray without an address: Ray's own choice


def ray_options(work: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options that run a command's ``work`` on a Ray cluster (read them with :func:`ray_from`)."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed([
            click.option("--ray", "ray_address", is_flag=False, flag_value=_RAY_DEFAULT, metavar="[ADDRESS]",
                         help=f"{work}; this process alone writes --out. Without ADDRESS: the cluster in RAY_ADDRESS "
                              "or started here by `ray start`, else a new local one; or HOST:PORT, ray://HOST:PORT, "
                              "local. Needs pip install 'ragfunnel[ray]'. A bare --ray takes the next word as ADDRESS: "
                              "put it after the arguments."),
            click.option("--ray-actors", type=click.IntRange(min=1), metavar="N",
                         help="Ray workers, each loading its models once [default: the cluster's CPUs / --ray-cpus]."),
            click.option("--ray-cpus", type=click.IntRange(min=1), metavar="N",
                         help="CPUs each Ray worker reserves; llama.cpp models and the bundled MiniLM run with as "
                              "many threads [default: 1]."),
            click.option("--ray-gpus", type=click.FloatRange(min=0), metavar="G",
                         help="GPUs each Ray worker reserves, for models that run on them [default: 0]."),
        ]):
            command = option(command)
        return command

    return decorate


def ray_from(given: dict[str, Any]) -> RayOptions | None:
    """The Ray options among ``given`` (removing them); None without --ray. Fails now, in one line, if Ray is
    not installed or a named head node cannot be reached."""
    from ragfunnel.ray_cluster import RayOptions, check_address, import_ray

    address = given.pop("ray_address", None)
    sizes = {"--ray-actors": given.pop("ray_actors", None), "--ray-cpus": given.pop("ray_cpus", None),
             "--ray-gpus": given.pop("ray_gpus", None)}
    if address is None:
        if given_sizes := [option for option, value in sizes.items() if value is not None]:
            raise ConfigError(f"{given_sizes[0]} sizes a Ray run; pass --ray too")
        return None
    import_ray()
    address = None if address == _RAY_DEFAULT else address
    check_address(address)
    return RayOptions(address=address, actors=sizes["--ray-actors"], cpus=sizes["--ray-cpus"] or 1,
                      gpus=sizes["--ray-gpus"] or 0.0)


def model_settings(given: dict[str, Any]) -> None:
    """Apply the process-wide model switches among ``given`` (--no-cache, --timeout, --calibration), removing
    them."""
    from ragfunnel.llm.registry import set_disk_caches, set_server_timeout

    if given.pop("no_cache", False):
        set_disk_caches(False)
    if (seconds := given.pop("timeout", None)) is not None:
        set_server_timeout(seconds)
    if (calibration := given.pop("calibration", None)) is not None:
        from ragfunnel.confidence.calibration import ENV_VAR, load_calibration

        load_calibration(calibration)  # a missing or damaged file is named now, once
        os.environ[ENV_VAR] = str(calibration)  # Ray workers and threads see it too


def debugging(ctx: click.Context) -> bool:
    """Whether ``ragfunnel --debug`` was given (an option of the top-level group)."""
    return bool(ctx.find_root().params.get("debug"))


def one_line(error: BaseException) -> str:
    """The one-line message of an error nothing in ragfunnel anticipated."""
    if isinstance(error, OSError):
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror or error} (check the path, its permissions and free disk space)"
    if isinstance(error, UnicodeDecodeError):
        return f"a file is not UTF-8 text (bad byte at offset {error.start}); convert it to UTF-8"
    if isinstance(error, json.JSONDecodeError):
        return f"a file is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
    return (f"unexpected {type(error).__name__}: {error}; re-run with `ragfunnel --debug ...` for the traceback "
            "and report it")


def _usage_line(e: click.UsageError, command: str) -> str:
    where = e.ctx.command_path if e.ctx else command
    return f"error: {e.format_message().rstrip('.')} (see `{where} --help`)"


def _exit(message: str, code: int) -> NoReturn:
    """Print ``message`` and exit with ``code``. Model calls a run abandoned in its worker threads are not
    waited for (a server call could take minutes): every finished row is already on disk, and the
    kernel releases the run's lock."""
    click.echo(message, err=True)
    if left_work_running():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM stops a run the way Ctrl-C does: finished rows kept, the rest cancelled


def cli_spelling(ctx: click.Context) -> Callable[[str], str]:
    """How an option named in an error is written on the command line ``ctx`` ran: the flag of the command's
    parameter of that name (``ray_address``: ``--ray``), else the name as a flag (``chunk_words``:
    ``--chunk-words``)."""
    command = ctx.command
    if isinstance(command, click.Group) and ctx.invoked_subcommand:  # a group's context: the subcommand it ran
        command = command.get_command(ctx, ctx.invoked_subcommand) or command
    flags = {p.name: max(p.opts, key=len) if isinstance(p, click.Option) else p.human_readable_name
             for p in command.params}
    return lambda name: flags.get(name) or "--" + name.replace("_", "-")


class OneLineErrors:
    """Turns any error into ``error: <message>`` and exit code 1, without a traceback (unless debugging).

    Mixed into the top-level group and into command groups that tests also run on their own.
    """

    def invoke(self, ctx: click.Context) -> Any:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _terminate)
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except click.UsageError as e:  # a bad option of a subcommand: one line too, with where to look
            _exit(_usage_line(e, ctx.command_path), e.exit_code)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Interrupted as e:
            _exit(e.spelled(cli_spelling(ctx)), Interrupted.exit_code)
        except KeyboardInterrupt:
            _exit("interrupted", Interrupted.exit_code)
        except Exception as e:
            if debugging(ctx):
                raise
            _exit(f"error: {e.spelled(cli_spelling(ctx)) if isinstance(e, RagfunnelError) else one_line(e)}", 1)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)  # type: ignore[misc]
        except click.UsageError as e:
            if parent is not None or isinstance(e, click.exceptions.NoArgsIsHelpError):
                raise  # a subcommand's bad option is the invoking group's to report; a bare command shows help
            _exit(_usage_line(e, info_name or "ragfunnel"), e.exit_code)


class Group(OneLineErrors, click.Group):
    pass


class Command(OneLineErrors, click.Command):
    pass


def document_options(command: Callable) -> Callable:
    """The limits on the files a command reads (PDF, DOCX, EPUB ...): :class:`ReadLimits`'s fields."""
    return declared_options(ReadLimits)(command)


def read_limits(given: dict[str, Any]) -> ReadLimits:
    """The :class:`ReadLimits` of ``document_options``, taken out of ``given``."""
    return declared_from(ReadLimits, given)


@contextmanager
def reading_bars() -> Iterator[None]:
    """Within the block, long reading (OCR of a scan, a page at a time) draws a progress bar on stderr, one per
    file, where stderr is a terminal."""
    from tqdm.auto import tqdm

    bars: dict[str, Any] = {}

    def show(what: str, done: int, total: int) -> None:
        bar = bars.get(what)
        if bar is None:
            bar = bars[what] = tqdm(total=total, desc=what, unit="page", disable=None, leave=False)
        bar.update(done - bar.n)
        if done >= total:
            bars.pop(what).close()

    with reading_files(show):
        try:
            yield
        finally:
            for bar in bars.values():
                bar.close()


def known_task(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A ``--task`` callback: the task checked, or a usage error listing the valid ones."""
    try:
        return None if value is None else check_task(value)
    except ConfigError as e:
        raise click.BadParameter(str(e)) from None


def _configs() -> list[tuple[str, type]]:
    """Every method's configuration, over a context and over an index, with the method's name."""
    entries = [(name, entry.config) for name, entry in REGISTRY.items()]
    return entries + [(f"{name} over an index", entry.over_index.config) for name, entry in REGISTRY.items()
                      if entry.over_index is not None]


def _click_type(opt: Option) -> click.ParamType | type:
    spec = opt.spec
    if opt.choices:
        return click.Choice(list(opt.choices))
    if bool in opt.kinds:
        return bool
    if Path in opt.kinds or tuple in opt.kinds:
        return click.Path(path_type=Path)
    ranged = {int: click.IntRange, float: click.FloatRange}.get(opt.kinds[0])
    if ranged is None:
        return str
    low = spec.gt if spec.gt is not None else spec.ge
    return ranged(min=low, max=spec.le, min_open=spec.gt is not None)


def _help(opt: Option, methods: list[tuple[str, type, Option]]) -> str:
    """The option's help, and its default (each method's, where they differ)."""
    spec = opt.spec
    if spec.default_text is not None:
        default = spec.default_text
    else:
        shown = {_shown(o.default) for _, _, o in methods}
        default = _shown(opt.default) if len(shown) == 1 else ", ".join(
            f"{_shown(o.default)} for {name}" for name, _, o in methods)
    return f"{spec.help} [default: {default}]"


def _shown(value: Any) -> str:
    return "none" if value in (None, ()) else str(value).lower() if isinstance(value, bool) else str(value)


def _field_option(opt: Option, *, default: Any, methods: list[tuple[str, type, Option]]
                  ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click option of a configuration field: ``--name`` (a pair of flags for a bool), typed and bounded."""
    flag = "--" + opt.name.replace("_", "-")
    kind = _click_type(opt)
    return click.option(f"{flag}/--no-{flag[2:]}" if kind is bool else flag, opt.name,
                        type=None if kind is bool else kind, default=default, metavar=opt.spec.metavar,
                        help=_help(opt, methods))


def _declared(config: type, name: str) -> Option:
    return next(o for o in options_of_config(config) if o.name == name)


def declared_option(config: type, name: str, *, flag: str | None = None, **click_settings: Any
                    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Field ``name`` of ``config``, a setting outside the methods (an index's, the reader's limits, the
    server's), as a click option: ``flag`` (``--name`` unless given), typed and bounded, showing the field's
    default. A switch is a flag that changes its default: ``--name`` when it is off, ``--no-name`` when it is
    on (its help the field's, negated); a list or a mapping is a repeatable option."""
    opt = _declared(config, name)
    flag = flag or "--" + name.replace("_", "-")
    spec = opt.spec
    help = spec.help if spec.default_text is None else f"{spec.help} [default: {spec.default_text}]"
    kind = _click_type(opt)
    if kind is bool and opt.default:
        return click.option(f"--no-{flag[2:]}", name, flag_value=False, default=True,
                            help=f"Do not {help[0].lower()}{help[1:]}", **click_settings)
    if kind is bool:
        return click.option(flag, name, is_flag=True, help=help, **click_settings)
    if {list, dict} & set(opt.kinds):
        return click.option(flag, name, multiple=True, metavar=spec.metavar, help=help, **click_settings)
    return click.option(flag, name, type=kind, default=opt.default, show_default=opt.default is not None,
                        metavar=spec.metavar, help=help, **click_settings)


def declared_options(config: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Every field of ``config`` as a click option (:func:`declared_option`), in declaration order; read them
    back with :func:`declared_from`."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for opt in reversed(options_of_config(config)):
            command = declared_option(config, opt.name)(command)
        return command

    return decorate


def declared_from(config: type[C], given: dict[str, Any]) -> C:
    """The ``config`` of the options :func:`declared_options` added, taken out of ``given``."""
    return config(**{opt.name: given.pop(opt.name) for opt in options_of_config(config)})


def config_option(config: type, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Field ``name`` of ``config`` as an option of a command that is not a method (``search``, ``funnel
    distill``), with the field's own default."""
    opt = _declared(config, name)
    return _field_option(opt, default=opt.default, methods=[("", config, opt)])


def config_options() -> list[Callable[[Callable[..., Any]], Callable[..., Any]]]:
    """A click option for every field of every method's configuration (unset: each method's own default), in
    the order the configurations declare them. Generated: a new field is a new option here."""
    by_name: dict[str, list[tuple[str, type, Option]]] = {}
    for method, config in _configs():
        for opt in options_of_config(config):
            if opt.spec.front_end:
                by_name.setdefault(opt.name, []).append((method, config, opt))
    return [_field_option(methods[0][2], default=None, methods=methods) for methods in by_name.values()]


def method_options(command: Callable) -> Callable:
    """The model and budget options shared by ``ask`` and ``eval``: the models, the confidence switches, and
    every method's configuration (:func:`config_options`; unset ones keep each method's default)."""
    for option in reversed([
        click.option("--light", metavar="SPEC",
                     help="Draft model for FB-RAG Stage II [default: bundled:qwen2.5-0.5b]."),
        click.option("--strong", metavar="SPEC", help="Answering model [default: bundled:qwen2.5-1.5b]. "
                     "Specs: bundled:NAME, gguf:PATH, openai:URL#MODEL, "
                     "openai:URL1,URL2#MODEL (servers taking turns)."),
        *config_options(),
        click.option("--abstain", type=click.FloatRange(0, 1), metavar="BELOW",
                     help="Answer 'unanswerable' when the answer's confidence is below BELOW (0-1)."),
        click.option("--calibration", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
                     help="Calibration file for confidence (`ragfunnel calibrate`) [default: $RAGFUNNEL_CALIBRATION, "
                          "else the one shipped, fitted on the bundled models]."),
        click.option("--no-cache", is_flag=True,
                     help="Bypass the on-disk caches (LLM calls, kept document states): every call runs the model, "
                          "nothing is stored."),
        timeout_option,
    ]):
        command = option(command)
    return command
