"""net.bandwidth and its iperf3 reading."""
