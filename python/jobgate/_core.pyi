"""Type stubs for the compiled core, `jobgate._core`. This is where the API is documented."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from os import PathLike
from typing import Any, BinaryIO, Literal

__version__: str
RUSTC_VERSION: str
"""The version of the rustc that compiled this core ("1.83.0"), for `jobgate_build_info`."""

Kind = Literal["jobspec", "spec_bundle", "job_record", "best_rec"]
# A document as a caller gives it: bytes or text (JSON or YAML), or a parsed mapping.
GivenDocument = bytes | bytearray | str | Mapping[str, Any]

KINDS: tuple[Kind, ...]
"""Every kind a document may be given as, in the core's order."""
PROJECT_FORBIDDEN: str
"""The id of the rule a JobSpec outside its account's projects breaks
(``forge.project.forbidden``): the service answers it with PERMISSION_DENIED."""
DEFAULT_LIMITS: dict[str, int]
"""The core's defaults of the ``[limits]`` keys it reads, by key, and
``max_depth_ceiling``: the deepest nesting a configuration may allow."""
RECORD_STATES: tuple[str, ...]
"""A job record's states, in the order of job_record.schema.json."""
RECORD_TERMINAL: tuple[str, ...]
"""The states that end a record: nothing follows them."""
RECORD_SOURCES: tuple[str, ...]
"""Who may write a transition."""

class CatalogEntry:
    """One recipe the deployment serves, in the shape of ``recipe.lock.json``. Every
    argument is required; ``jobgate.config`` builds these from ``[[catalog]]``."""

    def __init__(
        self,
        *,
        name: str,
        version: str,
        digest: str,
        runtime_id: str,
        framework_kind: str,
        requires_core: str | None,
        observability: Literal["platform", "external"],
        custom: bool,
    ) -> None: ...

class Settings:
    """What the core reads of a deployment's configuration. Every argument is required
    (``None`` where a rule is off), so a missing or unknown key is a TypeError;
    ``Config.core_settings()`` builds them from ``jobgate.toml``."""

    def __init__(
        self,
        *,
        max_document_bytes: int,
        max_depth: int,
        max_package_bytes: int,
        max_package_members: int,
        max_package_ratio: int,
        package_cache_bytes: int,
        max_violations: int,
        registries: Sequence[str] | None,
        series: Sequence[str] | None,
        max_gpus_per_job: int | None,
        catalog: Sequence[CatalogEntry] | None,
        rules: Mapping[str, str],
        project_rules: Mapping[str, Mapping[str, str]],
    ) -> None: ...

class Violation:
    """One broken rule at one place of a document."""

    @property
    def rule(self) -> str:
        """A stable rule id from the catalogue, e.g. ``tao.dotted_key``."""
    @property
    def field(self) -> str:
        """Where, as an RFC 6901 JSON Pointer; ``""`` is the whole document."""
    @property
    def message(self) -> str:
        """One sentence a person can act on."""
    @property
    def severity(self) -> Literal["error", "warning", "off"]:
        """``off`` only for a rule the deployment's ``[rules]`` turned off."""
    @property
    def line(self) -> int | None:
        """The line (from 1) of the value ``field`` names in the document's text (of the
        key, for rules about keys); None when the report was not made from text."""
    @property
    def column(self) -> int | None:
        """The column (from 1, in characters) beside ``line``."""
    @property
    def default_severity(self) -> Literal["error", "warning"] | None:
        """The severity the rules gave, when the deployment's ``[rules]`` changed it
        (``severity`` is then the configured one, ``off`` included)."""
    def to_dict(self) -> dict[str, str | int]:
        """``rule``, ``field``, ``message``, ``severity``, and ``line`` and ``column``
        when known."""

class Report:
    """The verdict on one document. Violations are ordered by field, then rule."""

    @property
    def kind(self) -> Kind | Literal["unknown"]: ...
    @property
    def verdict(self) -> Literal["pass", "fail"]: ...
    @property
    def ok(self) -> bool:
        """``True`` when no violation is an error."""
    @property
    def errors(self) -> int: ...
    @property
    def warnings(self) -> int: ...
    @property
    def violations(self) -> list[Violation]: ...
    def to_dict(self) -> dict[str, Any]:
        """``{"kind", "verdict", "violations": [{"rule", "field", "message", "severity"}]}``."""
    def to_json(self) -> str: ...
    def __bool__(self) -> bool: ...

class Validator:
    """A compiled validator: built once, thread-safe, reused for every document.

    Built from the core's ``settings``; without them, only the rules that need no
    deployment apply. ``jobgate.Validator`` is this class built from a configuration
    in any of its forms (a path to ``jobgate.toml``, a :class:`jobgate.Config`, or a
    mapping in the TOML's shape).
    """

    def __init__(self, settings: Settings | None = None) -> None: ...
    def check(
        self,
        document: GivenDocument | None,
        kind: Kind | None = None,
        root: str | PathLike[str] | None = None,
        package: str | PathLike[str] | None = None,
        *,
        owner: str | None = None,
        project_gpus_in_use: int | None = None,
        project_quota: int | None = None,
        projects: Sequence[str] | None = None,
        home: str | None = None,
        release_gil: bool = False,
        timeout: float | None = None,
    ) -> Report:
        """Checks one document (JSON or YAML ``bytes``/``str``, or a parsed ``dict``).

        With ``root`` (a producer directory) or ``package`` (a tar, tar.gz, tar.zst or
        zip archive) a spec-bundle's supporting files are verified too: present, regular,
        inside the root, hashing to their declared SHA-256, import-closed, and nothing
        undeclared in a package. With ``package`` the document may be ``None``: the
        package's own ``bundle.json``/``bundle.yaml`` is checked. Raises
        ``FileNotFoundError`` when the root cannot be opened. A package that inflates
        past ``limits.max_package_ratio`` times its size (once past 16 MiB) is refused
        with ``limits.size`` before the rest is inflated. With ``timeout`` (seconds:
        the caller's remaining time), reading the package stops once it has passed and
        ``TimeoutError`` is raised: no verdict.

        ``kind`` skips detection. The GIL is released for documents over 16 KiB, or
        always with ``release_gil=True`` (a hand-off costs more than checking a small
        document, so single-threaded callers keep it). ``owner`` is the authenticated account (the report
        warns ``forge.owner_overridden`` when the document names another);
        ``project_gpus_in_use`` and ``project_quota`` apply ``forge.quota.project`` to
        the GPUs a JobSpec's pools or a spec-bundle's ``compute_shape`` ask for;
        ``projects`` (the account's grant, ``"*"`` for every project) applies
        ``forge.project.forbidden`` to a JobSpec's ``metadata.project``, and a project
        outside it is told nothing of its quota; ``home`` names the project the
        account's spec-bundles are charged to (they name none).
        """
    def judge(
        self,
        document: GivenDocument,
        kind: Kind | None = None,
        package: str | PathLike[str] | None = None,
        *,
        owner: str | None = None,
        projects: Sequence[str] | None = None,
        home: str | None = None,
        stamp: bool = False,
        release_gil: bool = False,
        timeout: float | None = None,
    ) -> Judgement:
        """Checks one document for admission and reads, from the same parse, what
        admission needs of it: one call per document. The report is ``check``'s with
        the same arguments, except the project quota, which ``Judgement.with_usage``
        judges once the usage of the project is known (read in the transaction that
        opens the record). With ``stamp``, ``facts.stamped`` is the document rewritten
        with ``owner``; ``package`` and ``timeout`` as for ``check``."""
    def facts(self, document: GivenDocument, kind: Kind | None = None, *, owner: str | None = None) -> Facts | None:
        """Project, GPU count, id parts and image of a document, and with ``owner`` the
        document rewritten with that owner; ``None`` when it cannot be read."""
    def package_cache_stats(self) -> dict[str, int]:
        """``{"hits", "misses", "entries"}`` of the cache of packages already read whole,
        by the BLAKE3 hash of their bytes: a package sent with thousands of requests is
        inflated and hashed once. A hit gives exactly the report a miss would."""
    def digest_cache_stats(self) -> dict[str, int]:
        """``{"hits", "misses", "entries"}`` of the digest cache of files verified under
        producer roots: an unchanged file (same device, inode, size, mtime and ctime,
        settled for 2 seconds) is not hashed again."""
    def check_batch_request(
        self,
        request: bytes,
        *,
        owner: str | None = None,
        max_batch: int = ...,
        threads: int | None = None,
        quota_default: int | None = None,
        quota_projects: Mapping[str, int] | None = None,
        gpus_in_use: Mapping[str, int] | Callable[[], Mapping[str, int]] | Callable[[str], int] | None = None,
        projects: Sequence[str] | None = None,
        home: str | None = None,
        max_response_bytes: int | None = None,
        single: bool = False,
        unlocated: bool = False,
    ) -> BatchOutcome | None:
        """The service's AdmitBatch dry-run path: an encoded ``jobgate.v1.AdmitBatchRequest``
        in, the encoded ``AdmitBatchResponse`` out (GIL released, no Python object per
        document); ``None`` when the request is not a dry run of raw documents. With
        quotas, ``gpus_in_use`` (or what it returns, called only when this path answers)
        is the usage every document's project is judged against (a spec-bundle's is
        ``home``). With
        ``max_response_bytes``, the largest reports are cut as ``fit_reports`` does.
        With ``single``, the request is an encoded ``jobgate.v1.AdmitRequest`` and the
        response its ``AdmitResponse`` (Admit's dry-run path): answered only when it
        holds its document once, raw (protobuf merges a document given twice); a
        callable ``gpus_in_use`` is then called with the one project the document is
        charged to and returns its GPUs; with
        ``unlocated`` too, the report has no lines and columns (a typed message's JSON form)."""
    def stage(
        self,
        document: GivenDocument | None,
        job_dir: str | PathLike[str],
        *,
        root: str | PathLike[str] | None = None,
        package: str | PathLike[str] | None = None,
    ) -> Staging:
        """Verifies, then stages the closed set atomically under ``<job_dir>/inputs/action-helpers/``.

        An existing staging is reused when its manifest lists the same set and every file
        in it still has the manifest's size and SHA-256 (each is hashed again); anything
        else, and a symlink at ``inputs``, at the staging or inside it, is refused with
        ``tao.staging.conflict`` and left untouched. Nothing beneath ``job_dir`` is reached
        through a symlink. Nothing is written unless the report passes, and a staging that
        fails leaves nothing behind.
        """
    def check_many(
        self,
        documents: Iterable[GivenDocument],
        kind: Kind | None = None,
        *,
        threads: int | None = None,
        owner: str | None = None,
        projects: Sequence[str] | None = None,
        max_response_bytes: int | None = None,
    ) -> list[Report]:
        """Checks many documents with the GIL released, on every core (or ``threads``).
        With ``max_response_bytes``, the largest reports are cut as ``fit_reports`` does."""
    def check_paths(
        self,
        paths: Sequence[str | PathLike[str]],
        kind: Kind | None = None,
        *,
        threads: int | None = None,
    ) -> list[Report]:
        """Reads and checks document files by path in one call, with the GIL released,
        on every core (or ``threads``); no Python object is made for a file's bytes. A
        file that is not a regular file or cannot be read gets a ``json.syntax`` report
        saying why; one over ``limits.max_document_bytes``, ``limits.size`` (refused
        from its size, unread). Reports come back in the paths' order."""

class Judgement:
    """What ``Validator.judge`` decided of one document for admission."""

    report: Report
    """The report, without the project quota (``with_usage``)."""
    facts: Facts | None
    """What admission needs of the document; ``None`` when it cannot be read."""
    @property
    def gpus_claimed(self) -> int | None:
        """The GPUs the document charges to its project's quota; ``None`` when the quota
        does not apply to it (a kind that launches nothing, a count that cannot be
        charged, a project outside the grant)."""
    def with_usage(self, gpus_in_use: int, quota: int) -> Report:
        """The report knowing that the project charged holds ``gpus_in_use`` GPUs under
        ``quota``: with ``forge.quota.project`` when the document's GPUs do not fit, else
        ``report`` itself. Reads no document again."""

class Facts:
    """What admission needs besides the verdict, read from the core's own parse."""

    kind: str
    launches: bool
    """Whether the kind launches a job: only those are admitted."""
    charge: Literal["project", "home"] | None
    """Where an admission of it is charged: ``"project"``, the document's own
    (``project``); ``"home"``, the account's; ``None``, it launches nothing."""
    project: str
    gpus: int
    """What the quota charges: the GPUs the rules counted (0 for a document refused
    because a count cannot be charged)."""
    network_arch: str
    action: str
    image: str
    upload_excludes: list[str]
    stamped: bytes | None
    """The document with the authenticated owner stamped in, when an owner was given."""

class BatchOutcome:
    """What ``Validator.check_batch_request`` answered."""

    documents: int
    response: bytes | None
    """The encoded ``AdmitBatchResponse`` (``AdmitResponse`` with ``single``); ``None``
    when the batch was over ``max_batch``."""
    verdicts: dict[str, int]
    rules: dict[tuple[str, str], int]
    """Violations per ``(rule, severity)``."""

class LineSink:
    """The request log's writer: a thread of the core that stamps, joins and writes
    the lines handed over, without taking the GIL (but to write to a Python stream)."""

    def __init__(self, *, fd: int | None = None, stream: BinaryIO | None = None, capacity: int, write_bytes: int, gather_seconds: float) -> None:
        """Writes to ``fd`` (a descriptor it owns from now on) or to ``stream``, at most
        ``write_bytes`` a write, lines gathered ``gather_seconds`` from the first."""
    def line(self, created: float, head: bytes, fields: bytes) -> int:
        """Hands over ``{"ts":"<created>",<head>,`` and the members of the JSON object
        ``fields``; returns the lines to count as dropped (this one when ``capacity``
        wait already, and those the stream refused since the last handover)."""
    def whole(self, line: bytes) -> int:
        """Hands over a line encoded whole; returns as ``line`` does."""
    def pending(self) -> int:
        """Lines handed over and not yet taken by the writer."""
    def close(self, timeout: float) -> int:
        """Writes every line handed over and ends the writer, waiting at most
        ``timeout`` seconds; returns the refused lines not yet reported."""

class SqliteWriter:
    """The SQLite store's record writer: a thread of the core that opens the rows
    submitted meanwhile in one transaction, with the libsqlite3 this process loaded."""

    def __init__(self, path: str, insert: str, pragmas: list[str], python_sqlite: str) -> None:
        """A writer on the SQLite file ``path`` running ``insert`` for each row, with
        ``pragmas`` run first on its connection. RuntimeError unless Python's
        ``_sqlite3`` module (the file ``python_sqlite``) uses a loaded
        ``libsqlite3.so.0`` to share; ValueError when the file cannot be opened or a
        statement prepared."""
    def submit(self, rows: list[tuple[None | int | str | bytes, ...]]) -> Opening:
        """Queues ``rows`` to be opened together; returns at once."""
    def checkpoint_soon(self) -> None:
        """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` after the next commit."""
    def close(self, wait: float) -> bool:
        """Writes what is queued, then stops, waiting at most ``wait`` seconds;
        whether everything handed to it was written (or failed) by then. Later
        submissions fail with SQLITE_ABORT."""

class PostgresWriter:
    """The PostgreSQL store's record writer: a thread of the core that opens the rows
    submitted meanwhile in one statement, on a connection of its own made with the
    libpq this process loaded (psycopg's)."""

    def __init__(self, conninfo: str, statement: str, libpq: str) -> None:
        """A writer on the database ``conninfo`` names, running ``statement`` (its two
        parameters: the projects' locks and the rows, JSON texts) for each batch.
        RuntimeError unless the libpq at ``libpq`` is loaded; ValueError (with the
        SQLSTATE) when the connection cannot be made or the statement prepared."""
    def submit(self, rows: list[tuple[str, bytes]]) -> Opening:
        """Queues ``rows`` ((project, the row's JSON object) each) to be opened
        together; returns at once."""
    def close(self, wait: float) -> bool:
        """Writes what is queued, then stops, waiting at most ``wait`` seconds;
        whether everything handed to it was written (or failed) by then. Later
        submissions fail with SQLSTATE JG000."""

class Opening:
    """One submission's commit."""

    def wait(self) -> tuple[int | str, str] | None:
        """None once committed, else the failure: SQLite's extended result code (an
        int) or PostgreSQL's SQLSTATE (a str), and the message; lets the GIL go only
        while the commit is not in."""
    def done(self) -> bool:
        """Whether the commit is in (or failed) already."""

class Staging:
    """What ``Validator.stage`` did."""

    @property
    def report(self) -> Report: ...
    @property
    def ok(self) -> bool:
        """The report passed and the files are staged."""
    @property
    def directory(self) -> str | None:
        """The staging directory, or ``None`` when nothing was staged."""
    @property
    def reused(self) -> bool:
        """An identical staging was already there and was kept as it was."""
    @property
    def files(self) -> list[tuple[str, str, str, int]]:
        """``(source, destination, sha256, size)`` per staged file."""

class RecipeStatus:
    """How a ``recipe.lock.json`` stands against the catalog (``recipe_status``)."""

    status: Literal["current", "compatible", "upgrade_advised", "incompatible", "sdk_incompatible", "runtime_removed", "malformed"]
    message: str
    """What it means and what to do, naming both versions."""
    catalog_version: str | None
    """The catalog's recipe version, when it serves the lock's recipe."""
    catalog_digest: str | None
    catalog_runtime_id: str | None

def recipe_status(settings: Settings, lock: bytes, core_version: str = "") -> RecipeStatus:
    """How the lock ``lock`` stands against the catalog of ``settings``, by the terms of
    the ``forge.handshake.*`` checks and ``requires.core`` as
    ``forge.core_version.unsupported`` reads it, for a client of ``core_version``
    (empty: the lock's ``created_by.core_version``). Raises ValueError, with the
    limit's message, for a lock past the document limits."""

def project_quota(project: str, *, default: int | None, projects: Mapping[str, int]) -> int | None:
    """The GPUs ``project`` may hold in unfinished jobs under a ``[quota]`` table, as
    ``forge.quota.project`` reads it (``default`` for an unlisted project); ``None``
    is unlimited."""

def check_version_range(spec: str) -> None:
    """Raises ValueError, saying why, unless ``spec`` is a PEP 440 version range as
    ``forge.core_version.unsupported`` reads ``requires.core``."""

def validate_rules(rules: Mapping[str, str], project_rules: Mapping[str, Mapping[str, str]]) -> None:
    """Raises ValueError naming the table and rule unless ``[rules]`` (rule id → level)
    and ``[rules.projects.NAME]`` name catalogued rules that may be relaxed, each
    ``error``, ``warning`` or ``off``."""

def refused_too_large(size: int | None, limit: int, *, kind: Kind | None = None) -> Report:
    """The report of a document over the size limit, refused before it is read whole
    (``limits.size``); ``size`` is ``None`` when only known to exceed ``limit``."""

def refused_package_too_large(package: str, size: int, limit: int, *, kind: Kind | None = None) -> Report:
    """The report of an unpacked package whose files hold more than
    ``limits.max_package_bytes`` (``limits.size``)."""

def refused_project(project: str, projects: Sequence[str], *, kind: Kind | None = None) -> Report:
    """The report of a retry whose first admission is in ``project``, which the
    account's grant (``projects``) no longer reaches: ``forge.project.forbidden`` at a
    JobSpec's ``/metadata/project`` (at the document for a spec-bundle), worded as the
    rule words it, and nothing about the job."""

def refused_unreadable(reason: str, *, kind: Kind | None = None) -> Report:
    """The report of an input that could not be read at all (``json.syntax``);
    ``reason`` says why, e.g. the system's error."""

def fit_reports(reports: list[Report], max_bytes: int) -> list[Report]:
    """The reports of one batch with the largest cut so that together they take about
    `max_bytes` once encoded (and the response that carries them fits one message).
    Reports under their share come back unchanged; a cut report keeps its first
    violations, counts the rest in ``limits.violations``, and keeps its verdict."""

def redact(text: str) -> str:
    """``text`` with the secret part of every credential replaced by ``***`` (token
    bodies, URL passwords, ``Authorization: Bearer|Basic`` values, the values of
    ``--password``-style flags and of ``NAME=value`` with a credential name): the
    detector of ``tao.execution.secret``, which ``tao.record.secret`` uses for fewer
    shapes, so what the store keeps passes both, and what the first leaves alone is kept
    as it is."""

def read_document(document: GivenDocument) -> str:
    """The document as jobgate reads it, as JSON text: the input itself for JSON, the
    re-encoding for YAML. Raises ValueError (``"<rule>: <message>"``) for a document
    that jobgate refuses to read (``json.syntax``, ``limits.size``, ``limits.depth``)."""

def rules() -> list[dict[str, str | bool]]:
    """The rule catalogue: ``[{"rule", "severity", "summary", "relaxable"}]``;
    ``relaxable`` says whether ``[rules]`` may change the rule's severity."""

def kind_table() -> list[dict[str, Any]]:
    """Every kind, in ``KINDS`` order, as the core's table has it: ``name``, ``proto``
    (its ``jobgate.v1.Kind`` number), ``detect`` (the top-level keys that mark it),
    ``rank`` (the lowest wins when several kinds' keys are present), ``launches``,
    ``charge`` (``"project"``, ``"home"`` or ``None``, as ``Facts.charge``), and
    ``typed_lists`` (the top-level arrays its schema requires, which a typed message's
    JSON form holds even when empty)."""

def yaml_comments(text: str) -> list[tuple[int, int, bool, str]]:
    """The comments of a YAML text as the reader sees them, as ``(line, column, alone,
    text)``: a ``#`` at the start of a line or after a blank, outside every scalar (a
    ``#`` in a quoted string, a block scalar's content or a plain scalar such as ``a#b``
    is data); ``alone`` when only blanks precede it on its line; ``text`` what follows
    the ``#``. Empty for text the parser does not read as YAML."""

def content_keys(salt: bytes, items: list[tuple[str, bytes | None]]) -> list[str | None]:
    """BLAKE3 content keys, in lowercase hex, of ``(name, bytes)`` items: the hash of
    ``salt``, the name, a NUL and the bytes; with ``None`` for bytes, those of the file
    the name is a path of, read on every core with the GIL released. ``None`` for a
    file that is not a regular file or cannot be read."""

def read_documents(paths: Sequence[str | PathLike[str]], max_bytes: int, *, kind: Kind | None = None) -> list[bytes | Report]:
    """Document files read by path in one call, on every core with the GIL released:
    each file's bytes, or the report refusing it (for documents of ``kind``): one that
    is not a regular file or cannot be read (``json.syntax``), one over ``max_bytes``
    (``limits.size``, refused from its size, unread)."""

def permuted_job_number(number: int, key: bytes, bits: int) -> int:
    """``number``'s image under the keyed permutation of the integers below
    2^``bits`` that numbers job ids: a 10-round balanced Feistel network whose round
    function is BLAKE3 keyed with ``key`` (32 bytes), fed the round, the half width and
    the right half (16 bytes, big-endian), its first 16 bytes read big-endian.
    ValueError for another key length, odd ``bits`` or above 64, or a number out of
    range."""
