"""Apache Kafka's own Java clients for tests: its command-line tools as real JVM
processes, and Spark's Kafka source for a SparkSession.

    run_kafka_tool(CONSOLE_PRODUCER, ["--bootstrap-server", servers, "--topic", "acme.t"],
                   input=b"one\\ntwo\\n", properties=sasl_plain_properties("acme--app", "s"))
    run_kafka_tool(CONSUMER_GROUPS, ["--bootstrap-server", servers, "--list"])
    SparkSession.builder.config("spark.jars", ",".join(map(str, spark_kafka_jars())))

The jars come from Maven Central as bench/kafkapeer.py fetches Kafka's: ``mvn
dependency:copy-dependencies`` (runtime scope) of a generated pom, into a folder of
``.services/`` (``MERIDIAN_SERVICES_DIR`` moves it, as it moves ``./dev``'s services):

- ``kafka-tools-<version>/jars``: ``org.apache.kafka:kafka-tools`` at bench/kafkapeer.py's
  ``KAFKA_VERSION`` (the console producer and consumer, the consumer-groups command) with
  log4j2 behind SLF4J (``log4j-slf4j-impl``, kafkapeer's ``LOG4J_VERSION``);
- ``spark-kafka-<version>/jars``: ``spark-sql-kafka-0-10`` of the installed PySpark (its
  version, unless ``MERIDIAN_SPARK_KAFKA_VERSION`` names another, and its Scala version)
  with its runtime dependencies.

A folder is fetched once: it is complete when its stamp (the pom it was fetched with) is
in it, and it appears only complete (fetched beside it, then renamed). Fetches take one
file lock (``fcntl.flock``), so pytest processes racing for a folder (or sharing
``~/.m2`` through two mvn runs) fetch one at a time and the later ones find the stamp.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

# bench/'s modules import their siblings (benchkit) as top-level modules, as bench/'s
# scripts run from there.
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))

from benchkit import pdeathsig_prefix, progress

from bench import kafkapeer

KAFKA_VERSION = kafkapeer.KAFKA_VERSION
SERVICES_DIR = kafkapeer.KAFKA_HOME.parent  # .services/, or MERIDIAN_SERVICES_DIR
STAMP = ".complete"
LOCK_FILE = ".kafka-jvm.lock"
SPARK_KAFKA_VERSION_ENV = "MERIDIAN_SPARK_KAFKA_VERSION"
# Spark's Kafka source when the registry lacks the installed PySpark's (its Maven
# artifacts can lag PyPI's release).
SPARK_KAFKA_FALLBACK = "4.2.0"

CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
# The three tools' flag for a client configuration file in Kafka 4.x (their --help; the
# producer's --producer.config and the consumer's --consumer.config are deprecated).
CONFIG_FLAG = "--command-config"
TOKEN_URL = "sasl.oauthbearer.token.endpoint.url"
# Kafka 4 calls no token or JWKS endpoint this system property does not list.
ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
# A short-lived client: a small heap, the quickest start (C1 only, serial GC).
TOOL_JVM_OPTIONS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
    "-Dfile.encoding=UTF-8",
)
# Warnings and errors only, on stderr: stdout is the tool's output.
LOG4J2 = """rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
"""
POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>meridian.tests</groupId>
  <artifactId>{name}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}  </dependencies>
</project>
"""
DEPENDENCY = """    <dependency>
      <groupId>{0}</groupId>
      <artifactId>{1}</artifactId>
      <version>{2}</version>
    </dependency>
"""


class KafkaToolTimeout(subprocess.TimeoutExpired):
    """A tool still ran at its deadline (it was killed); carries what it wrote."""

    def __str__(self) -> str:
        command = [str(part) for part in self.cmd]  # shown from the main class on
        shown = command[command.index("-cp") + 2 :] if "-cp" in command else command
        err = (self.stderr or b"").decode(errors="replace")[-4000:]
        return f"{' '.join(shown)} ran {self.timeout} s; its stderr ended with:\n{err}"


# -- the jars -----------------------------------------------------------------------------
def kafka_tools_classpath() -> str:
    """A ``java -cp`` value (jar paths joined by ``os.pathsep``) with Kafka's tools at
    ``KAFKA_VERSION`` and a log4j2 binding for their SLF4J logging; fetched from Maven
    Central on first use (see the module docstring), raising ``kafkapeer.KafkaError`` when
    mvn is missing or fails."""
    dependencies = [
        ("org.apache.kafka", "kafka-tools", KAFKA_VERSION),
        ("org.apache.logging.log4j", "log4j-slf4j-impl", kafkapeer.LOG4J_VERSION),
    ]
    jars = fetch_jars(SERVICES_DIR / f"kafka-tools-{KAFKA_VERSION}", dependencies)
    return os.pathsep.join(str(jar) for jar in _jars_in(jars))


def spark_kafka_jars(spark_version: str | None = None) -> list[Path]:
    """The jars ``spark.read.format("kafka")`` needs beyond what the installed PySpark
    ships: ``spark-sql-kafka-0-10_<scala>`` at ``spark_version`` with its runtime
    dependencies (kafka-clients, commons-pool2, spark-token-provider-kafka, ...), less
    every artifact ``pyspark/jars`` already holds (in whatever version); for
    ``spark.jars`` or ``ADD JAR``. Fetched on first use like ``kafka_tools_classpath``.

    ``spark_version`` None: ``$MERIDIAN_SPARK_KAFKA_VERSION``, else PySpark's own, the
    one to use (the source is built against its Spark's internals), else, when the
    registry does not serve PySpark's, ``SPARK_KAFKA_FALLBACK`` (an earlier minor
    version of the same major, whose source runs on the later Spark)."""
    chosen = spark_version or os.environ.get(SPARK_KAFKA_VERSION_ENV)
    versions = [chosen] if chosen else [importlib.metadata.version("pyspark")]
    if not chosen and SPARK_KAFKA_FALLBACK not in versions:
        versions.append(SPARK_KAFKA_FALLBACK)
    shipped = sorted(path.name for path in _pyspark_jars().glob("*.jar"))
    artifact = f"spark-sql-kafka-0-10_{_scala_version(shipped)}"
    for version in versions:
        try:
            jars = fetch_jars(
                SERVICES_DIR / f"spark-kafka-{version}", [("org.apache.spark", artifact, version)]
            )
        except kafkapeer.KafkaError as exc:
            if version != versions[-1]:
                progress(f"Spark's Kafka source {version} is not served: trying {versions[-1]}")
                continue
            hint = f"${SPARK_KAFKA_VERSION_ENV} names another version of Spark's Kafka source"
            raise kafkapeer.KafkaError(f"{exc}\n({hint})") from exc
        return [jar for jar in _jars_in(jars) if not _ships(shipped, _artifact_id(jar))]
    raise AssertionError("unreachable: the last version raises")


def fetch_jars(folder: Path, dependencies: Sequence[tuple[str, str, str]]) -> Path:
    """``folder/jars``: ``dependencies`` (group, artifact, version) and everything they
    need at runtime, in Maven's repository layout; fetched by mvn under the fetch lock
    unless a complete copy of exactly these is there."""
    items = "".join(DEPENDENCY.format(*dependency) for dependency in dependencies)
    pom = POM.format(name=folder.name, dependencies=items)
    jars = folder / "jars"
    if _complete(jars, pom):
        return jars
    SERVICES_DIR.mkdir(parents=True, exist_ok=True)
    with _fetch_lock():
        if not _complete(jars, pom):
            _copy_dependencies(folder, pom, jars)
    return jars


def _complete(jars: Path, pom: str) -> bool:
    stamp = jars / STAMP
    return stamp.exists() and stamp.read_text() == pom


@contextlib.contextmanager
def _fetch_lock() -> Iterator[None]:
    fd = os.open(SERVICES_DIR / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _copy_dependencies(folder: Path, pom: str, jars: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pom_file = folder / "pom.xml"
    pom_file.write_text(pom)
    partial = folder / "jars.partial"
    shutil.rmtree(partial, ignore_errors=True)  # an interrupted fetch's leftovers
    progress(f"fetching {folder.name} from Maven Central")
    # -U: an artifact missing at an earlier try is asked for again, not taken as absent.
    command = ["mvn", "-q", "-B", "-U", "-f", str(pom_file), "dependency:copy-dependencies"]
    command += ["-DincludeScope=runtime", "-Dmdep.useRepositoryLayout=true"]
    command += [f"-DoutputDirectory={partial}"]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=kafkapeer.FETCH_TIMEOUT_S
        )
    except FileNotFoundError as exc:
        raise kafkapeer.KafkaError("mvn is not installed (apt-get install maven)") from exc
    if done.returncode != 0:
        raise kafkapeer.KafkaError(f"mvn failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    (partial / STAMP).write_text(pom)
    shutil.rmtree(jars, ignore_errors=True)  # a copy fetched for another pom
    partial.rename(jars)


def _jars_in(jars: Path) -> list[Path]:
    return sorted(jars.rglob("*.jar"))


def _artifact_id(jar: Path) -> str:
    """The artifact of a jar in Maven's layout (``<group>/<artifact>/<version>/<file>``)."""
    return jar.parent.parent.name


def _pyspark_jars() -> Path:
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None, "pyspark is not installed"
    assert spec.submodule_search_locations, spec
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def _scala_version(shipped: Sequence[str]) -> str:
    """The Scala version PySpark's own ``spark-core_<scala>-<version>.jar`` is built for."""
    found = next((m for name in shipped if (m := re.match(r"spark-core_([\d.]+)-", name))), None)
    assert found is not None, f"no spark-core jar in {_pyspark_jars()}"
    return found.group(1)


def _ships(shipped: Sequence[str], artifact: str) -> bool:
    """Whether PySpark ships ``artifact`` (as ``<artifact>-<version>.jar``, any version)."""
    return any(re.fullmatch(re.escape(artifact) + r"-\d.*\.jar", name) for name in shipped)


# -- client settings ----------------------------------------------------------------------
def sasl_plain_properties(client_id: str, secret: str) -> dict[str, str]:
    """Java client settings for SASL/PLAIN over plaintext, with a service account's client
    id and secret as user name and password (a Meridian Kafka listener exchanges them for
    a token at its ``--sasl-plain-token-url``)."""
    login = "org.apache.kafka.common.security.plain.PlainLoginModule required"
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": f"{login} username={_jaas(client_id)} password={_jaas(secret)};",
    }


def sasl_oauthbearer_properties(token_url: str, client_id: str, secret: str) -> dict[str, str]:
    """Java client settings for SASL/OAUTHBEARER over plaintext with Kafka's built-in
    login handler (KIP-768): the client itself gets its token from ``token_url`` with the
    client-credentials grant, sending ``client_id`` and ``secret`` as HTTP Basic
    credentials (not as form fields), and refreshes it. The credentials are Kafka 4.1's
    settings (KIP-1139; its ``clientId``/``clientSecret`` JAAS options, all a 3.x client
    takes, are deprecated). Kafka 4 calls the URL only when the JVM allows it
    (``oauthbearer_jvm_options``; ``run_kafka_tool`` passes that)."""
    module = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
    handler = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.login.callback.handler.class": handler,
        TOKEN_URL: token_url,
        "sasl.oauthbearer.client.credentials.client.id": client_id,
        "sasl.oauthbearer.client.credentials.client.secret": secret,
        "sasl.jaas.config": f"{module} required;",
    }


def oauthbearer_jvm_options(properties: Mapping[str, str] | None) -> list[str]:
    """The ``-D`` option letting a JVM call the token endpoint ``properties`` name (none
    when they name none)."""
    url = (properties or {}).get(TOKEN_URL)
    return [f"-D{ALLOWED_URLS}={url}"] if url else []


def _jaas(value: str) -> str:
    """``value`` as a quoted JAAS option value."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def properties_text(properties: Mapping[str, str]) -> str:
    """``properties`` in Java's ``.properties`` format (read as ISO 8859-1, so anything
    else is ``\\uXXXX``-escaped; separators in keys and a value's leading space too)."""
    lines = []
    for key, value in properties.items():
        text = _escape(value, "")
        text = "\\" + text if text.startswith(" ") else text
        lines.append(f"{_escape(key, '=: #!')}={text}\n")
    return "".join(lines)


def _escape(text: str, specials: str) -> str:
    units = text.encode("utf-16-be")  # \\u escapes name UTF-16 code units
    out = []
    for i in range(0, len(units), 2):
        char = chr(int.from_bytes(units[i : i + 2], "big"))
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char in specials:
            out.append("\\" + char)
        elif " " <= char <= "~":
            out.append(char)
        else:
            out.append(f"\\u{ord(char):04x}")
    return "".join(out)


# -- running a tool -----------------------------------------------------------------------
def run_kafka_tool(
    main_class: str,
    args: list[str],
    *,
    input: bytes | None = None,
    timeout_s: float = 120,
    properties: dict[str, str] | None = None,
    config_flag: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run Kafka's tool ``main_class`` (``CONSOLE_PRODUCER``, ``CONSOLE_CONSUMER``,
    ``CONSUMER_GROUPS`` or another main class of the classpath) with ``args``, wait for
    it to exit and return its exit code, stdout and stderr, whatever the code. The
    caller reads what it printed: Kafka 4's three tools exit with 0 even when they fail
    (credentials refused, an authorization error, a send that failed, a group command's
    ``Error: ...`` on stdout).

    ``input`` is its stdin (None: none, as at end of file). ``properties`` are its client
    settings, written to a file readable by this user alone that lives only while the
    tool runs, and passed with ``config_flag`` (default: ``CONFIG_FLAG``, the three tools'
    flag); a token endpoint they name is allowed to the JVM
    (``oauthbearer_jvm_options``). The JVM has a 256 MiB heap, logs warnings and errors
    to stderr, is SIGKILLed when this process dies (``setpriv --pdeathsig``) and, with
    its process group, once ``timeout_s`` has passed: then ``KafkaToolTimeout`` is raised
    with what it wrote. Fetching the jars on first use is not part of ``timeout_s``.
    """
    classpath = kafka_tools_classpath()
    with tempfile.TemporaryDirectory(prefix="kafka-tool-") as scratch:  # mode 0700
        folder = Path(scratch)
        (folder / "log4j2.properties").write_text(LOG4J2)
        command = [*pdeathsig_prefix(), kafkapeer.java_binary(), *TOOL_JVM_OPTIONS]
        command += [f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}"]
        command += [*oauthbearer_jvm_options(properties), "-cp", classpath, main_class, *args]
        if properties is not None:
            config = folder / "client.properties"
            config.touch(mode=0o600)
            config.write_text(properties_text(properties))
            command += [config_flag or CONFIG_FLAG, str(config)]
        return _run(command, input, timeout_s)


def _run(
    command: list[str], input: bytes | None, timeout_s: float
) -> subprocess.CompletedProcess[bytes]:
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(input, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        out, err = process.communicate()
        raise KafkaToolTimeout(command, timeout_s, out, err) from None
    except BaseException:  # interrupted: leave no JVM behind
        _kill_group(process)
        process.wait()
        raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.killpg(process.pid, signal.SIGKILL)
