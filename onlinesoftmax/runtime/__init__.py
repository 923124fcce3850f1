"""The runtime: kernel sources to compiled functions (loader), launch plans built once (plan),
driver calls for cluster, cooperative and dependent launches (driver), the device (device)."""
