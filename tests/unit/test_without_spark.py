"""The CLI where no Spark is installed (an operations box, a CI runner): every command that needs no local Spark
works, and those that do say how to get one. pyspark is hidden from a child Python, as if not installed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from checkpoints import hdfs_checkpoint

# A child Python in which `import pyspark` fails as it does where pyspark is not installed.
WITHOUT_PYSPARK = textwrap.dedent("""\
    import sys

    class NoPyspark:
        def find_spec(self, name, path=None, target=None):
            if name == "pyspark" or name.startswith(("pyspark.", "py4j")):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoPyspark())
    from sparkpoint.cli.main import main
    code = main(sys.argv[1:])
    assert not any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules), "pyspark was imported"
    sys.exit(code)
    """)


def sparkpoint(home, *args, env_extra=None):
    env = {"SPARKPOINT_HOME": str(home), "PATH": "/usr/bin:/bin", **(env_extra or {})}
    return subprocess.run([sys.executable, "-c", WITHOUT_PYSPARK, *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_the_catalog_commands_run_where_no_spark_is_installed(tmp_path):
    home = tmp_path / "home"
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt" / "alarms", committed=3, planned=True)
    done = sparkpoint(home, "-o", "json", "savepoint", "--from-checkpoint", str(checkpoint))
    assert done.returncode == 0, done.stderr
    created = json.loads(done.stdout)
    for args in (["list", "--all"], ["savepoints"], ["inspect", created["id"]], ["verify", created["id"]],
                 ["restore", created["id"], str(tmp_path / "restored")], ["horizon"],
                 ["prune", "--keep-last", "1", "--dry-run"], ["rollback-sink", created["id"], "--dry-run"],
                 ["savepoint", "--dispose", created["id"]]):
        done = sparkpoint(home, *args)
        # rollback-sink: this checkpoint's savepoint records no sink, which it says by name (not a missing Spark)
        expected = 18 if args[0] == "rollback-sink" else 0
        assert done.returncode == expected, (args, done.stderr)
        assert "pyspark" not in done.stderr and "internal error" not in done.stderr, (args, done.stderr)


def test_what_needs_a_local_spark_says_how_to_get_one(tmp_path):
    home = tmp_path / "home"
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt" / "alarms", committed=3)
    created = json.loads(sparkpoint(home, "-o", "json", "savepoint", "--from-checkpoint", str(checkpoint)).stdout)
    app = tmp_path / "app.py"
    app.write_text("")
    done = sparkpoint(home, "run", "--detach", str(app))
    assert done.returncode == 10 and done.stderr.strip().splitlines()[-1] == (
        "sparkpoint: error: no Spark to run the job with: set SPARK_HOME (or --spark-home) to a Spark 3.5 to 4.3, "
        "or install one into this environment (pip install 'sparkpoint[spark]')"), done.stderr
    done = sparkpoint(home, "inspect", "--state", created["id"])
    assert done.returncode == 10 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_metrics_run_where_no_spark_is_installed(tmp_path):
    home = tmp_path / "home"
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt" / "alarms", committed=3, planned=True)
    assert sparkpoint(home, "savepoint", "--from-checkpoint", str(checkpoint)).returncode == 0
    done = sparkpoint(home, "metrics")
    assert done.returncode == 0, done.stderr
    assert 'sparkpoint_catalog_savepoints{name="alarms",status="complete"} 1.0' in done.stdout
