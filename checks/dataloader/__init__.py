"""dataloader.throughput and the demand it is judged against."""
