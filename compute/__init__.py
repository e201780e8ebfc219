"""Code that runs on a compute unit: the Spark session on Ray and the Spark host actor.

Nothing here imports the web portal (`app`): a compute unit's nodes carry this package
and the jars, not the portal.
"""
