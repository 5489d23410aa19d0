"""Pure reading and ranking of what the trainings left: the guide that orders candidates by
the evidence of the dumps."""
