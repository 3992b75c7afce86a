"""The motion-alarm application of the demo, in two versions.

Events (room, event, ts) arrive as JSON files: `activate`, `deactivate`, `motion`. State per room is
kept with transformWithState (query name "alarms", its identity across versions):
- v1 keeps `armed` and raises an alarm on motion in an armed room;
- v2 adds a tolerance period: motion within TOLERANCE seconds after activation raises no alarm.
  It adds the state variable `armed_at`; rooms armed under v1 have none, so they stay armed with
  no tolerance (they were armed long ago).
Each micro-batch's alarms go to OUTPUT/batch-<id>.json (replaced if the batch re-runs).

usage: motion_alarms.py v1|v2 EVENTS_DIR OUTPUT_DIR
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming import StatefulProcessor

TOLERANCE = 30


class MotionAlarms(StatefulProcessor):
    def __init__(self, version: str):
        self.version = version

    def init(self, handle):
        self.armed = handle.getValueState("armed", "armed boolean")
        if self.version == "v2":
            self.armed_at = handle.getValueState("armed_at", "ts long")

    def handleInputRows(self, key, rows, timerValues):
        room = key[0]
        armed = self.armed.get()[0] if self.armed.exists() else False
        for row in sorted(rows, key=lambda r: r.ts):
            if row.event == "activate":
                armed = True
                if self.version == "v2":
                    self.armed_at.update((row.ts,))
            elif row.event == "deactivate":
                armed = False
                if self.version == "v2":
                    self.armed_at.clear()
            elif row.event == "motion" and armed and not self._tolerated(row.ts):
                yield Row(room=room, ts=row.ts, alarm=f"motion in armed {room} ({self.version})")
        self.armed.update((armed,))

    def _tolerated(self, ts: int) -> bool:
        if self.version != "v2" or not self.armed_at.exists():
            return False
        return ts - self.armed_at.get()[0] < TOLERANCE

    def close(self):
        pass


def main(version: str, events_dir: str, output_dir: str) -> None:
    spark = (
        SparkSession.builder.appName(f"motion-alarms-{version}")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    events = (spark.readStream.schema("room string, event string, ts long").option("maxFilesPerTrigger", 1)
              .json(events_dir))
    alarms = events.groupBy("room").transformWithState(MotionAlarms(version), "room string, ts long, alarm string",
                                                        "Append", "None")

    def write(batch, batch_id):
        os.makedirs(output_dir, exist_ok=True)
        rows = [row.asDict() for row in batch.orderBy("ts").collect()]
        tmp = os.path.join(output_dir, f".batch-{batch_id}.tmp")
        with open(tmp, "w") as handle:
            json.dump(rows, handle)
        os.replace(tmp, os.path.join(output_dir, f"batch-{batch_id}.json"))

    (alarms.writeStream.queryName("alarms").outputMode("append").foreachBatch(write)
     .trigger(processingTime="300 milliseconds").start().awaitTermination())


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("v1", "v2"):
        sys.exit(__doc__)
    main(*sys.argv[1:])
