SELECT day, count(*) FROM orders GROUP BY day;
