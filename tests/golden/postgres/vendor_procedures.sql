DROP PROCEDURE IF EXISTS "Purchasing"."sp_MSins_PurchasingVendor"
-- statement
CREATE OR REPLACE PROCEDURE "Purchasing"."sp_MSins_PurchasingVendor"(c1 integer, c2 varchar(15), c3 varchar(50), c4 smallint, c5 boolean, c6 boolean, c7 varchar(1024), c8 timestamp)
LANGUAGE plpgsql AS $sparksync$
#variable_conflict use_variable
BEGIN
  INSERT INTO "Purchasing"."Vendor" ("VendorID", "AccountNumber", "Name", "CreditRating", "PreferredVendorStatus", "ActiveFlag", "PurchasingWebServiceURL", "ModifiedDate")
  VALUES (c1, c2, c3, c4, c5, c6, c7, c8);
END
$sparksync$
-- statement
DROP PROCEDURE IF EXISTS "Purchasing"."sp_MSupd_PurchasingVendor"
-- statement
CREATE OR REPLACE PROCEDURE "Purchasing"."sp_MSupd_PurchasingVendor"(c1 integer = NULL, c2 varchar(15) = NULL, c3 varchar(50) = NULL, c4 smallint = NULL, c5 boolean = NULL, c6 boolean = NULL, c7 varchar(1024) = NULL, c8 timestamp = NULL, pkc1 integer = NULL, bitmap bytea = NULL)
LANGUAGE plpgsql AS $sparksync$
#variable_conflict use_variable
BEGIN
  UPDATE "Purchasing"."Vendor" AS t SET
    "VendorID" = CASE get_byte(bitmap, 0) & 1 WHEN 1 THEN c1 ELSE t."VendorID" END,
    "AccountNumber" = CASE get_byte(bitmap, 0) & 2 WHEN 2 THEN c2 ELSE t."AccountNumber" END,
    "Name" = CASE get_byte(bitmap, 0) & 4 WHEN 4 THEN c3 ELSE t."Name" END,
    "CreditRating" = CASE get_byte(bitmap, 0) & 8 WHEN 8 THEN c4 ELSE t."CreditRating" END,
    "PreferredVendorStatus" = CASE get_byte(bitmap, 0) & 16 WHEN 16 THEN c5 ELSE t."PreferredVendorStatus" END,
    "ActiveFlag" = CASE get_byte(bitmap, 0) & 32 WHEN 32 THEN c6 ELSE t."ActiveFlag" END,
    "PurchasingWebServiceURL" = CASE get_byte(bitmap, 0) & 64 WHEN 64 THEN c7 ELSE t."PurchasingWebServiceURL" END,
    "ModifiedDate" = CASE get_byte(bitmap, 0) & 128 WHEN 128 THEN c8 ELSE t."ModifiedDate" END
  WHERE t."VendorID" = pkc1;
  IF NOT FOUND THEN
    RAISE EXCEPTION '20598: The row was not found at the Subscriber when applying the replicated command.'
      USING ERRCODE = 'SS598';
  END IF;
END
$sparksync$
-- statement
DROP PROCEDURE IF EXISTS "Purchasing"."sp_MSdel_PurchasingVendor"
-- statement
CREATE OR REPLACE PROCEDURE "Purchasing"."sp_MSdel_PurchasingVendor"(pkc1 integer)
LANGUAGE plpgsql AS $sparksync$
#variable_conflict use_variable
BEGIN
  DELETE FROM "Purchasing"."Vendor" AS t
  WHERE t."VendorID" = pkc1;
  IF NOT FOUND THEN
    RAISE EXCEPTION '20598: The row was not found at the Subscriber when applying the replicated command.'
      USING ERRCODE = 'SS598';
  END IF;
END
$sparksync$
