"""What a graded class tells its instructor: item analysis, misconception clusters, similar solutions, the
class report that shows them, and catalogue entries suggested from the clusters."""
