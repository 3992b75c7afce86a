"""Driver-side code: runs inside the user's Spark application. The only package that imports pyspark
at module level (besides the lazy state reader)."""
