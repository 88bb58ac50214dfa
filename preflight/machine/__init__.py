"""Small probes of the local machine: the PCI bus, the page cache, filesystems."""
